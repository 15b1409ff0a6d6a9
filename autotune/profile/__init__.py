"""The profile stage: serve under torch.profiler (or read a trace), build the op table, rank the hot spots.

    from autotune.profile import profile_serving, latest_hotspots, shapes_for
    result = profile_serving(compose(["workload.num_requests=4"]))     # writes traces/<run>/
    shapes_for("rms_norm", latest_hotspots("traces"))  # [ProfiledShape((rows, width), "float32", calls, us), ...]

`autotune profile --help` (autotune/profile/command.py) describes the command and its outputs.
"""

from autotune.profile.hotspots import hotspot_for, hotspots_in, latest_hotspots, rank_hotspots, shapes_for
from autotune.profile.optable import op_table, read_op_table, read_trace, serving_time_us
from autotune.profile.profiler import ProfileResult, profile_serving, profile_trace
from autotune.records import Hotspot, ProfiledShape, amdahl_gain

__all__ = ["Hotspot", "ProfileResult", "ProfiledShape", "amdahl_gain", "hotspot_for", "hotspots_in",
           "latest_hotspots", "op_table", "profile_serving", "profile_trace", "rank_hotspots", "read_op_table",
           "read_trace", "serving_time_us", "shapes_for"]
