"""fibril_sim/motor_feedback: applied force, velocity and (DC motors) current of an actuator."""

from __future__ import annotations

import mujoco
import numpy as np

from .base import BuildContext, ComponentType, Field, ResolvedComponent
from .device import DEVICE_FIELDS, Device, DeviceDescriptor, device_descriptor

SAMPLE_TYPE = "fibril_sim/motor_feedback_sample/v1"
COMPONENTS = ("force", "velocity", "current")


class MotorFeedbackType(ComponentType):
    """Sample ``[force, velocity, current]`` in actuator space. ``current`` is force / K for a
    native DC motor (K the compiled effective motor constant) and 0 for other actuators.
    """

    type_id = "fibril_sim/motor_feedback"
    role = "device"
    bind_keys = (("actuator",), ())
    fields = {
        **DEVICE_FIELDS,
        "force_noise": Field("float", 0.0, minimum=0.0, unit="N·m or N",
                             doc="actuator force noise standard deviation"),
        "velocity_noise": Field("float", 0.0, minimum=0.0, unit="rad/s or m/s",
                                doc="actuator velocity noise standard deviation"),
        "current_noise": Field("float", 0.0, minimum=0.0, unit="A",
                               doc="motor current noise standard deviation (DC motors)"),
    }

    def bind(self, component: ResolvedComponent, ctx: BuildContext) -> DeviceDescriptor:
        name = component.bind["actuator"]
        aid = ctx.object_id(mujoco.mjtObj.mjOBJ_ACTUATOR, name,
                            component.where.key("bind.actuator"), "actuator")
        dcmotor = int(ctx.model.actuator_gaintype[aid]) == mujoco.mjtGain.mjGAIN_DCMOTOR
        constant = float(ctx.model.actuator_gainprm[aid][1]) if dcmotor else 0.0
        return device_descriptor(
            component, ctx, sample_type=SAMPLE_TYPE, component_names=COMPONENTS,
            frame_id=name,
            binding={"actuator": name, "actuator_id": aid, "motor_constant": constant},
            factory=MotorFeedback)


class MotorFeedback(Device):
    __slots__ = ("_aid", "_inv_k", "_std", "_views")

    def __init__(self, descriptor: DeviceDescriptor, rng: np.random.Generator) -> None:
        super().__init__(descriptor, rng)
        constant = descriptor.binding["motor_constant"]
        self._aid = descriptor.binding["actuator_id"]
        self._inv_k = 1.0 / constant if constant > 0 else 0.0
        config = descriptor.config
        self._std = (config["force_noise"], config["velocity_noise"], config["current_noise"])
        self._views: tuple[np.ndarray, np.ndarray] | None = None

    def acquire(self, model: mujoco.MjModel, data: mujoco.MjData) -> np.ndarray:
        views = self._views
        if data is not self._data or views is None:  # views kept per MjData
            self._data = data
            views = self._views = (data.actuator_force, data.actuator_velocity)
        aid = self._aid
        force = views[0].item(aid)
        velocity = views[1].item(aid)
        current = force * self._inv_k
        force_std, velocity_std, current_std = self._std
        if force_std:
            force += force_std * self.normal1()
        if velocity_std:
            velocity += velocity_std * self.normal1()
        if current_std:
            current += current_std * self.normal1()
        return np.array((force, velocity, current))

    def block_inputs(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        return (("actuator_force", (self._aid,)), ("actuator_velocity", (self._aid,)))

    def acquire_block(self, model: mujoco.MjModel, inputs: np.ndarray) -> np.ndarray:
        count = inputs.shape[0]
        out = np.empty((count, 3))
        out[:, :2] = inputs
        out[:, 2] = inputs[:, 0] * self._inv_k
        noisy = [(j, std) for j, std in enumerate(self._std) if std]
        if noisy:  # acquire's draws, sample by sample in this order
            draws = self.normal1_many(count * len(noisy)).reshape(count, len(noisy))
            for k, (j, std) in enumerate(noisy):
                out[:, j] += std * draws[:, k]
        return out

    def skip(self, model: mujoco.MjModel, data: mujoco.MjData) -> None:
        for std in self._std:  # the draws acquire makes, in its order
            if std:
                self.normal1()

    def silent_draws(self) -> tuple[int, int]:
        return 0, sum(1 for std in self._std if std)
