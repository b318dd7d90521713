"""Base-controlled mechanical systems, reconstruction and geometric phases (Cabrera, *Base-controlled mechanical systems and geometric phases*).

A mechanical system on ``Q → Q/G = B`` whose base (shape) variables follow a prescribed curve;
the group variables ``g(t)`` are induced by conserved momentum, nonholonomic or affine
constraints.  :class:`BaseControlledSystem` builds every gauge quantity by autodiff from the
kinetic energy, the action, a section and the constraints; :class:`Reconstruction` (system + base
curve) is run by :func:`geomjax.simulate` with :class:`MomentumLGVI` (structure-preserving),
:class:`ReconstructionRKMK4` (fourth order) or :class:`HorizontalLift` (zero momentum /
kinematic).  :mod:`.phases` gives holonomies and the dynamic/geometric factorization (with the constraint
term for nonholonomic systems); :mod:`.gauges` the nonholonomic and mechanical gauges;
:mod:`.examples` the paper's systems.
"""

from . import examples
from .base_velocity import BaseVelocityState, BaseVelocitySystem, LiftMagnus4
from .core import BaseControlledSystem, Coefficients, Reconstruction, saddle_solve
from .examples import (
    ball_in_ball,
    ball_on_turntable,
    deforming_body,
    free_rigid_body,
    gyrostat,
    linked_bodies,
    magnetic_deforming_body,
    vertical_disk,
)
from .gauges import TabulatedGauge, mechanical_gauge, nonholonomic_gauge
from .methods import (
    HorizontalLift,
    KinematicState,
    KinematicSystem,
    Magnus4,
    MomentumLGVI,
    ReconstructionRKMK4,
    gauss_times,
    magnus4_update,
)
from .phases import holonomy, nonholonomic_phases, reconstruct, so3_phases, solid_angle

__all__ = [
    "BaseControlledSystem",
    "BaseVelocityState",
    "BaseVelocitySystem",
    "Coefficients",
    "HorizontalLift",
    "KinematicState",
    "KinematicSystem",
    "LiftMagnus4",
    "Magnus4",
    "MomentumLGVI",
    "Reconstruction",
    "ReconstructionRKMK4",
    "TabulatedGauge",
    "ball_in_ball",
    "ball_on_turntable",
    "deforming_body",
    "examples",
    "free_rigid_body",
    "gauss_times",
    "gyrostat",
    "holonomy",
    "linked_bodies",
    "magnetic_deforming_body",
    "magnus4_update",
    "mechanical_gauge",
    "nonholonomic_gauge",
    "nonholonomic_phases",
    "reconstruct",
    "saddle_solve",
    "so3_phases",
    "solid_angle",
    "vertical_disk",
]
