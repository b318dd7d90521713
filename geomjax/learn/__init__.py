"""Learning and identifying dynamics on Lie groups through the simulator.

* :func:`fit_parameters`: physical parameters of any geomjax system on a Lie group (inertia kept
  SPD, masses positive, first moments, damping, input maps) from recorded motions
  (:class:`Recording`), with unknown initial states, multiple shooting, Levenberg–Marquardt and
  the Gauss–Newton covariance.
* Learned models as ordinary systems (:mod:`geomjax.learn.models`): neural potentials and
  dissipation on SO(3)/SE(3), configuration-dependent inertias (SPD by construction) and input
  maps in coordinates, trained through the discrete flow (:func:`fit_model`).
* Parametric models: any module with ``dynamics() -> (system, method)`` (one mass shared by the
  inertia and gravity, a thrust map in the method) is fitted like a system.
* :mod:`geomjax.learn.reference`: independent reference motions (SciPy DOP853);
  :mod:`geomjax.learn.problems`: the worked pendulum and quadrotor problems; :mod:`geomjax.learn.baselines`:
  the black-box neural ODE (diffrax) it is compared with.
"""

from . import problems, reference
from .baselines import NeuralODE, NeuralODEFit, NeuralODEStep, fit_neural_ode
from .data import Recording
from .identify import FitError, FitResult, fit_parameters, fitting_loss, select_leaves
from .models import (
    GroupLagrangianSystem,
    InputMapped,
    ModelFit,
    NeuralDissipation,
    NeuralInertia,
    NeuralInputMap,
    NeuralPotential,
    fit_model,
    neural_leaves,
)
from .parameterize import from_unconstrained, to_unconstrained

__all__ = [
    "FitError",
    "FitResult",
    "GroupLagrangianSystem",
    "InputMapped",
    "ModelFit",
    "NeuralDissipation",
    "NeuralInertia",
    "NeuralInputMap",
    "NeuralODE",
    "NeuralODEFit",
    "NeuralODEStep",
    "NeuralPotential",
    "Recording",
    "fit_model",
    "fit_neural_ode",
    "fit_parameters",
    "fitting_loss",
    "from_unconstrained",
    "neural_leaves",
    "problems",
    "reference",
    "select_leaves",
    "to_unconstrained",
]


def __getattr__(name: str):
    # deprecated module attributes: ``Trajectory`` was this package's name for a recorded motion,
    # the same word as geomjax.control.Trajectory (a curve traversed in time)
    if name == "Trajectory":
        from .._internal.warn import deprecated

        deprecated("geomjax.learn.Trajectory", "geomjax.learn.Recording")
        return Recording
    raise AttributeError(f"module 'geomjax.learn' has no attribute {name!r}")
