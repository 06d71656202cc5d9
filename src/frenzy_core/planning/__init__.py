"""Planning: which GPU type, how many GPUs, which nodes and which layout a training job should get.

``plan_job`` lists candidate layouts with the vectorised memory and time models, then OR-Tools CP-SAT chooses
the layout and its node placement together (see :mod:`frenzy_core.planning.placement` for the formulation).
"""

from frenzy_core.planning.baselines import (
    BaselinePlan,
    assess_baseline,
    marp_configs,
    marp_plan,
    user_request_plan,
)
from frenzy_core.planning.estimators import AnalyticEstimator, LayoutEstimator
from frenzy_core.planning.launchers import LAUNCH_SCOPES, LaunchScope
from frenzy_core.planning.plan import Alternative, Plan, Rejection, RejectReason
from frenzy_core.planning.planner import SOLVERS, plan_job
from frenzy_core.planning.request import SEARCHED_TRAINING_FIELDS, Objective, PlacementMode, PlanConstraints

__all__ = [
    "LAUNCH_SCOPES", "SEARCHED_TRAINING_FIELDS", "SOLVERS", "Alternative", "AnalyticEstimator", "BaselinePlan",
    "LaunchScope", "LayoutEstimator", "Objective", "PlacementMode", "Plan", "PlanConstraints", "RejectReason",
    "Rejection", "assess_baseline", "marp_configs", "marp_plan", "plan_job", "user_request_plan",
]
