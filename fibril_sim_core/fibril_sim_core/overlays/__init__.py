"""Typed parameter overlays: the artifact format and validation (``artifact``), the MuJoCo
target kinds written into an MjSpec before compilation (``mujoco_targets``) and, for the kinds
where that is bit-identical, straight into a compiled model (``compiled``)."""

from .artifact import (ARTIFACT_FORMAT, ComponentTarget, MujocoTarget, OverlayArtifact,
                       OverlayError, OverlayParameter, OverlayTarget, ParameterOverlays,
                       check_conflicts, load_overlay_artifact, merge_layers, overlay_document,
                       parse_target, parse_value, validate_parameter)
from .mujoco_targets import KINDS, MujocoKind, apply_mujoco_overlays, compiled_value

__all__ = [
    "ARTIFACT_FORMAT", "KINDS", "ComponentTarget", "MujocoKind", "MujocoTarget",
    "OverlayArtifact", "OverlayError", "OverlayParameter", "OverlayTarget", "ParameterOverlays",
    "apply_mujoco_overlays", "check_conflicts", "compiled_value", "load_overlay_artifact",
    "merge_layers", "overlay_document", "parse_target", "parse_value", "validate_parameter",
]
