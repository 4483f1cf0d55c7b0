"""The simulation side of a calibration: the candidate plan a parameter vector runs, the
observations read from it, device-output decoders and initial-state coordinates.

Below the request (which resolves its selectors on the nominal plan) and above the shared
vocabulary (``errors``, ``parameters``, ``alignment``); reads no recording.
"""
