"""Second-order trajectory optimization on Lie groups: iLQR, DDP, control-limited DDP and an
augmented-Lagrangian outer loop, driven by any geomjax integrator.

An :class:`OptimalControlProblem` is a system, a method (its ``step`` *is* the discrete
dynamics ``x_{k+1} = f(x_k, u_k, t_k)``), an initial state, ``dt``, ``steps``, a running cost
``l(t, state, u)`` and a terminal cost ``Φ(state)``:

    J(x, u) = Σ_k dt · l(t_k, x_k, u_k) + Φ(x_N),     lower ≤ u_k ≤ upper,

with optional path and terminal constraints ``c_E = 0``, ``c_I ≤ 0`` (handled by
:class:`AugmentedLagrangian`).

**The chart.**  States live on ``G × g*`` (or in coordinates); the solvers work in the tangent
space at the current iterate: ``x ⊕ δ = (g·exp(η), μ + ν)`` and ``y ⊖ x = (log(g_x⁻¹ g_y),
μ_y − μ_x)`` (:class:`LieGroupChart`; :class:`EuclideanChart` for coordinates).  The linearization
of a node is the autodiff Jacobian of ``(δ, w) ↦ f(x̄_k ⊕ δ, ū_k + w) ⊖ x̄_{k+1}`` at 0: its value
is the *gap* (zero after a rollout, the defect of multiple shooting otherwise), its Jacobians
``A = F_x``, ``B = F_u`` include the change of chart, and the cost derivatives ``l_x, l_u, l_xx,
l_ux, l_uu`` are those of ``l(t, x̄ ⊕ δ, ū + w)`` — on a group, log-map costs are differentiated
in the left-trivialized tangent (Boutselis & Theodorou, *Discrete-time differential dynamic
programming on Lie groups*, 2020, §4; Alcan, Abu-Dakka & Kyrki, *Constrained trajectory
optimization on matrix Lie groups via Lie-algebraic DDP*, 2023, §III).

**The backward pass** (Mayne's DDP; Tassa, Mansard & Todorov, *Control-limited differential dynamic
programming*, ICRA 2014, §III) with the gaps ``f̄`` of multiple shooting (Mastalli et al.,
*Crocoddyl: an efficient and versatile framework for multi-contact optimal control*, ICRA 2020,
§IV, the feasibility-driven DDP):

    V'_x ← V_x(k+1) + V_xx(k+1) f̄_{k+1}
    Q_x = l_x + Aᵀ V'_x,  Q_u = l_u + Bᵀ V'_x,
    Q_xx = l_xx + Aᵀ V_xx A (+ V'_x · F_xx),  Q_ux = l_ux + Bᵀ V_xx A (+ V'_x · F_ux),
    Q_uu = l_uu + Bᵀ V_xx B (+ V'_x · F_uu) + ρ I,

the terms in parentheses being DDP's second-order dynamics (:class:`DDP`; :class:`ILQR` drops
them: Gauss–Newton).  The feedforward ``k`` minimizes ``½ kᵀ Q_uu k + Q_uᵀ k`` over the box
``lower − ū ≤ k ≤ upper − ū`` by projected Newton (Tassa et al. §III-B, Algorithm 1); the feedback
``K = −Q_uu,ff⁻¹ Q_ux`` acts on the free controls only.  ``ρ`` is a Levenberg–Marquardt
regularization (×10 on a failed factorization or a failed line search, ÷10 after a step longer
than ½).  The forward pass ``u = clip(ū + α k + K (x ⊖ x̄))`` closes a fraction ``α`` of the gaps
and is accepted on the expected improvement ``α (d₁ + α d₂/2)`` (crocoddyl's FDDP rule;
:class:`StrictFDDP` has crocoddyl's test exactly).

**The phases** of an iteration are methods of :class:`AbstractDDPSolver` named after crocoddyl's
(``linearize``, ``backward_pass``, ``expected_improvement``, ``stopping_criterion``,
``try_step``, ``update_regularization``) over typed records (:class:`Linearization`,
:class:`BackwardPass`, :class:`ExpectedImprovement`, :class:`Trial`, :class:`DDPHistory`): a
variant is a subclass that overrides one (:class:`DDP` its ``quadratic_model``,
:class:`StrictFDDP` its ``accepts``).

Everything runs in one compiled ``lax.while_loop`` with a fixed iteration cap, the driver's
(:func:`.loop.iterate`: the cap, the :class:`History`, the non-finite check; a solver of one's
own provides ``init``/``step``/``terminate``/``postprocess``, :class:`AbstractOCPSolver`); a batch
of problems runs under ``jax.vmap`` (each member stops on its own: a finished member's iterate no longer
changes).  Results: :class:`OCPSolution` with a status (:attr:`OCPSolution.stop_reason`,
:meth:`OCPSolution.check`) and a per-iteration history.
"""

from .backward import BackwardPass, box_qp
from .chart import AbstractStateChart, EuclideanChart, LieGroupChart
from .line_search import ExpectedImprovement, Trial
from .linearize import Linearization, NodeDerivatives
from .loop import History
from .problem import Actuated, OptimalControlProblem, ResidualCost
from .solution import OCPSolution
from .solve import quasi_static_controls, solve_ocp
from .solvers import (
    DDP,
    ILQR,
    AbstractDDPSolver,
    AbstractOCPSolver,
    AugmentedLagrangian,
    DDPHistory,
    DDPState,
    StrictFDDP,
    WarmStart,
)

__all__ = [
    "DDP",
    "ILQR",
    "AbstractDDPSolver",
    "AbstractOCPSolver",
    "AbstractStateChart",
    "Actuated",
    "AugmentedLagrangian",
    "BackwardPass",
    "DDPHistory",
    "DDPState",
    "EuclideanChart",
    "ExpectedImprovement",
    "History",
    "LieGroupChart",
    "Linearization",
    "NodeDerivatives",
    "OCPSolution",
    "OptimalControlProblem",
    "ResidualCost",
    "StrictFDDP",
    "Trial",
    "WarmStart",
    "box_qp",
    "quasi_static_controls",
    "solve_ocp",
]
