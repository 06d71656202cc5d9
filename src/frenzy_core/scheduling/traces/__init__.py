"""Readers of public GPU-cluster traces (Philly, Sia/Pollux, Helios, Alibaba spot) into ``TraceJob``s."""

from frenzy_core.scheduling.traces.load import READERS, OnError, TraceWarning, load_trace, read_trace
from frenzy_core.scheduling.traces.records import SkippedRow, TraceFormat, TraceJob, TraceLoad

__all__ = ["READERS", "OnError", "SkippedRow", "TraceFormat", "TraceJob", "TraceLoad", "TraceWarning",
           "load_trace", "read_trace"]
