"""State charts: local coordinates ``x ⊕ δ``, ``y ⊖ x`` in which the solvers linearize (left-
trivialized perturbations on a Lie group, plain differences in coordinates)."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.flatten_util import ravel_pytree

from ...lie import LieGroup
from ...systems.base import AbstractLieGroupSystem

__all__ = ["AbstractStateChart", "EuclideanChart", "LieGroupChart", "default_chart"]


class AbstractStateChart(eqx.Module):
    """Local coordinates of the state space around a point: ``plus(x, δ) = x ⊕ δ`` and
    ``minus(y, x) = y ⊖ x`` (so that ``x ⊕ (y ⊖ x) = y``; the order of
    :meth:`geomjax.LieGroup.rminus`).  ``δ`` is a flat ``(n,)`` vector."""

    @abc.abstractmethod
    def plus(self, system, x, d): ...

    @abc.abstractmethod
    def minus(self, system, y, x): ...

    def dim(self, system, x) -> int:
        return int(jax.eval_shape(lambda a: self.minus(system, a, a), x).shape[0])


class LieGroupChart(AbstractStateChart):
    """``(g, μ) ⊕ (η, ν) = (g·r(η), μ + ν)`` and ``(g', μ') ⊖ (g, μ) = (r⁻¹(g⁻¹g'), μ' − μ)``:
    left-trivialized perturbations of a state of an
    :class:`~geomjax.systems.AbstractLieGroupSystem` (through its ``split``/``make_state``).

    ``retraction="cayley"`` (default, where the group has a Cayley map; else exp): ``r = cay``,
    ``r⁻¹ = cay⁻¹`` (:meth:`LieGroup.cay`);
    ``"exp"``: ``r = exp``, ``r⁻¹ = log``.  ``cay(ξ) = exp(ξ) + O(|ξ|³)``, so both charts have
    the same first and second derivatives at ``δ = 0``: at a rollout (no gaps) the
    linearization ``A, B``, the cost derivatives and DDP's second-order terms are those of the
    exponential chart, while the rational Cayley map is far cheaper to differentiate twice
    (compile time: the second derivatives of the quaternion-based SO(3) logarithm are ~7× the
    program)."""

    retraction: str = eqx.field(static=True, default="cayley")

    def __check_init__(self):
        if self.retraction not in ("cayley", "exp"):
            raise ValueError(
                "LieGroupChart: argument 'retraction' must be 'cayley' or 'exp', "
                f"got {self.retraction!r}"
            )

    def _cayley(self, G) -> bool:
        # groups without a Cayley map (the base class raises) use exp/log
        return self.retraction == "cayley" and type(G).cay is not LieGroup.cay

    def plus(self, system, x, d):
        g, mu = system.split(x)
        G = system.group
        n = G.dim
        r = G.cay(d[:n]) if self._cayley(G) else G.exp(d[:n])
        return system.make_state(G.compose(g, r), mu + d[n:])

    def minus(self, system, y, x):
        gy, muy = system.split(y)
        gx, mux = system.split(x)
        G = system.group
        h = G.between(gx, gy)
        eta = G.cay_inv(h) if self._cayley(G) else G.log(h)
        return jnp.concatenate([eta, muy - mux])


class EuclideanChart(AbstractStateChart):
    """All floating leaves of the state, flattened (:class:`~geomjax.VariationalState` and other
    states in coordinates)."""

    def plus(self, system, x, d):
        flat, unravel = ravel_pytree(x)
        return unravel(flat + d.astype(flat.dtype))

    def minus(self, system, y, x):
        return ravel_pytree(y)[0] - ravel_pytree(x)[0]


def default_chart(system) -> AbstractStateChart:
    return LieGroupChart() if isinstance(system, AbstractLieGroupSystem) else EuclideanChart()
