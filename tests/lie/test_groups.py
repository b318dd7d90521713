"""Group-generic property tests: every group of the group layer, batch shapes (), (5,), (2, 3).

Each property is computed by a module-level jitted function (compiled once per group, batch shape
and dtype) and checked in NumPy, so hypothesis can try many examples cheaply.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given

from geomjax._internal.eager import EAGER_COMPILER_OPTIONS
from geomjax.lie import LieGroup

from .strategies import BATCHES, GROUPS, group_id, random_algebra, random_element, seeds

pytestmark = pytest.mark.parametrize("G", GROUPS, ids=group_id)


def _mv(A, x):
    return jnp.einsum("...ij,...j->...i", A, x)


def expm(A, squarings=6, terms=16):
    """Reference matrix exponential: Taylor series of A/2^s, squared s times (cheap to compile;
    accurate to round-off for the |A| ≲ 10 used here)."""
    A = A / 2.0**squarings
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    term, out = eye, eye
    for k in range(1, terms):
        term = term @ A / k
        out = out + term
    for _ in range(squarings):
        out = out @ out
    return out


def _jacobians_from_forward_mode(G, xi):
    """Right and left Jacobians from forward-mode derivatives of exp (no log involved):
    column j of J_r is vee(exp(xi)^{-1} d/dxi_j exp(xi)), of J_l vee(d/dxi_j exp(xi) exp(xi)^{-1})."""

    def one(x):
        M = G.to_matrix(G.exp(x))
        dM = jax.jacfwd(lambda y: G.to_matrix(G.exp(y)))(x)  # (n, n, d)
        Minv = jnp.linalg.inv(M)
        Jr = jax.vmap(lambda D: G.vee(Minv @ D), in_axes=-1, out_axes=-1)(dM)
        Jl = jax.vmap(lambda D: G.vee(D @ Minv), in_axes=-1, out_axes=-1)(dM)
        return Jr, Jl

    flat = xi.reshape(-1, G.dim)
    Jr, Jl = jax.vmap(one)(flat)
    return Jr.reshape(xi.shape + (G.dim,)), Jl.reshape(xi.shape + (G.dim,))


def _inputs(G, seed, batch):
    return {
        **{n: random_element(G, seed + i, batch) for i, n in enumerate("ghk")},
        **{n: random_algebra(G, seed + i, batch) for i, n in zip((3, 4, 5), ("xi", "eta", "mu"))},
        "xi_p": random_algebra(G, seed + 6, batch, max_angle=np.pi - 1e-3),  # principal ball
        "xi_j": random_algebra(G, seed + 7, batch, max_angle=3.0),
        "p": np.random.default_rng(seed + 8).standard_normal(
            (*batch, {"SO3": 3, "SE3": 3, "SO2": 2, "SE2": 2}.get(G.name, G.dim))
        ),
    }


# a one-shot program per (group, batch shape): compiled with the eager tier's options (XLA:CPU
# optimization level 0, legacy emitters), which cut its compile time ~3x (SE(3): 12 -> 4 s of
# CPU) and leave the identities' round-off at the bounds below (the library's eager calls run
# with the same options)
@functools.partial(jax.jit, static_argnums=0, compiler_options=EAGER_COMPILER_OPTIONS)
def _identities(G, a):
    """All algebraic identities of the group layer as (lhs, rhs, atol) triples.

    One jitted function per (group, batch shape) keeps compilation to a minimum.
    """
    g, h, k, xi, eta, mu, xi_p, xi_j, p = (
        a[n] for n in ("g", "h", "k", "xi", "eta", "mu", "xi_p", "xi_j", "p")
    )
    batch = xi.shape[:-1]
    M = G.to_matrix
    e = G.identity(batch)
    X, Y = G.hat(xi), G.hat(eta)
    Jr_ref, Jl_ref = _jacobians_from_forward_mode(G, xi_j)
    eye_d = jnp.broadcast_to(jnp.eye(G.dim), Jr_ref.shape)
    eye_n = jnp.eye(G.matrix_dim)
    C = G.cay(xi_j)
    out = {
        # group axioms; the matrix representation is a homomorphism
        "associativity": (
            M(G.compose(G.compose(g, h), k)),
            M(G.compose(g, G.compose(h, k))),
            1e-12,
        ),
        "right identity": (M(G.compose(g, e)), M(g), 1e-14),
        "left identity": (M(G.compose(e, g)), M(g), 1e-14),
        "right inverse": (M(G.compose(g, G.inverse(g))), M(e), 1e-12),
        "left inverse": (M(G.compose(G.inverse(g), g)), M(e), 1e-12),
        "homomorphism": (M(G.compose(g, h)), M(g) @ M(h), 1e-12),
        "member": (G.defect(g), jnp.zeros(batch), 1e-12),
        # exp / log
        "exp(log g) = g": (M(G.exp(G.log(g))), M(g), 1e-11),
        "log(exp xi) = xi": (G.log(G.exp(xi_p)), xi_p, 1e-10),
        "exp = expm(hat)": (M(G.exp(1.5 * xi)), expm(G.hat(1.5 * xi)), 1e-12),
        # algebra and adjoints
        "vee(hat xi) = xi": (G.vee(X), xi, 1e-15),
        "g hat(xi) g^-1 = hat(Ad_g xi)": (
            M(g) @ X @ jnp.linalg.inv(M(g)),
            G.hat(_mv(G.Ad(g), xi)),
            1e-11,
        ),
        "ad(xi) eta = vee[X, Y]": (_mv(G.ad(xi), eta), G.vee(X @ Y - Y @ X), 1e-12),
        "coad = ad^T mu": (G.coad(xi, mu), jnp.einsum("...ji,...j->...i", G.ad(xi), mu), 1e-12),
        "Ad homomorphism": (G.Ad(G.compose(g, h)), G.Ad(g) @ G.Ad(h), 1e-11),
        "Ad(exp xi) = expm(ad xi)": (G.Ad(G.exp(xi)), expm(G.ad(xi)), 1e-11),
        # Jacobians against forward-mode derivatives of exp
        "J_r": (G.jac_right(xi_j), Jr_ref, 1e-10),
        "J_l": (G.jac_left(xi_j), Jl_ref, 1e-10),
        "J_r^-1 J_r = I": (G.jac_right_inv(xi_j) @ G.jac_right(xi_j), eye_d, 1e-10),
        "J_l^-1 J_l = I": (G.jac_left_inv(xi_j) @ G.jac_left(xi_j), eye_d, 1e-10),
        "J_l = Ad(exp xi) J_r": (G.jac_left(xi_j), G.Ad(G.exp(xi_j)) @ G.jac_right(xi_j), 1e-11),
        # Cayley
        "cay on group": (G.defect(C), jnp.zeros(batch), 1e-12),
        "cay_inv(cay xi) = xi": (G.cay_inv(C), xi_j, 1e-11),
        # Cayley Jacobians (closed forms) against forward-mode derivatives of cay
        "Jcay_l": (G.cay_jac_left(xi_j), LieGroup.cay_jac_left(G, xi_j), 1e-11),
        "Jcay_l^-1 Jcay_l = I": (G.cay_jac_left_inv(xi_j) @ G.cay_jac_left(xi_j), eye_d, 1e-11),
        "Jcay_r(xi) = Jcay_l(-xi)": (G.cay_jac_right(xi_j), LieGroup.cay_jac_left(G, -xi_j), 1e-11),
        # left-trivialized gradient of U(g) = sum(W * M(g)) against d/dε U(g exp(ε e_i))
        "left_gradient": (
            G.left_gradient(g, jax.grad(lambda a: jnp.sum(jnp.sin(M(a))))(g)),
            jax.vmap(
                lambda gg: jax.grad(lambda e: jnp.sum(jnp.sin(M(G.compose(gg, G.exp(e))))))(
                    jnp.zeros(G.dim)
                )
            )(g.reshape((-1, *G.element_shape))).reshape((*batch, G.dim)),
            1e-12,
        ),
    }
    if G.name[0] not in "RT":  # abelian groups stored as vectors: cay is exp
        X_j = G.hat(xi_j)
        out["cay = (I - X/2)^-1 (I + X/2)"] = (
            M(C),
            jnp.linalg.solve(eye_n - X_j / 2, eye_n + X_j / 2),
            1e-12,
        )
    # left action
    out["left action"] = (G.act(g, G.act(h, p)), G.act(G.compose(g, h), p), 1e-12)
    if G.name in ("SE3", "SE2"):
        ph = jnp.concatenate([p, jnp.ones((*batch, 1))], -1)
        out["matrix action"] = (G.act(g, p), _mv(M(g), ph)[..., :-1], 1e-12)
    elif G.name in ("SO3", "SO2"):
        out["matrix action"] = (G.act(g, p), _mv(M(g), p), 1e-12)
    return out


# unbatched and a two-axis batch (leading-axis broadcasting in general); a one-axis batch is
# checked against vmap and a loop below (each batch shape is a compilation of all identities:
# ~20 s of the suite per shape)
@pytest.mark.parametrize("batch", [b for b in BATCHES if len(b) != 1])
@given(seed=seeds())
def test_group_identities(G, batch, seed):
    """Axioms, exp/log round trips, exp = expm(hat), Ad/ad/coad, the four Jacobians against
    forward-mode derivatives of exp, Cayley, and the action: one hypothesis example checks all."""
    for name, (lhs, rhs, atol) in _identities(G, _inputs(G, seed, batch)).items():
        np.testing.assert_allclose(
            np.asarray(lhs), np.asarray(rhs), atol=atol, err_msg=f"{G.name}: {name}"
        )


def test_cayley_is_second_order_retraction(G):
    xi = random_algebra(G, 7, (), scale=1.0)
    errs = [
        float(jnp.max(jnp.abs(G.to_matrix(G.cay(s * xi)) - G.to_matrix(G.exp(s * xi)))))
        for s in (1e-1, 5e-2)
    ]
    if G.name[0] in "RT":
        assert errs[0] < 1e-14  # identical on abelian groups
        return
    order = np.log(errs[0] / errs[1]) / np.log(2.0)
    assert 2.8 < order < 3.2  # local error O(|xi|^3)


def _batched_fns(G, x, h):
    return (G.exp(x), G.log(h), G.Ad(h), G.jac_left_inv(x), G.compose(h, G.exp(x)))


@pytest.mark.parametrize("batch", [(5,), (2, 3)])
def test_vmap_equals_loop_and_broadcasting(G, batch):
    xi = random_algebra(G, 3, batch, max_angle=3.0)
    g = random_element(G, 4, batch)
    flat_xi, flat_g = xi.reshape(-1, G.dim), g.reshape((-1, *G.element_shape))
    quick = functools.partial(jax.jit, static_argnums=0, compiler_options=EAGER_COMPILER_OPTIONS)
    one = quick(_batched_fns)
    loops = [one(G, flat_xi[i], flat_g[i]) for i in range(flat_xi.shape[0])]
    vms = quick(jax.vmap(_batched_fns, in_axes=(None, 0, 0)))(G, flat_xi, flat_g)
    broadcasts = one(G, xi, g)
    for k, name in enumerate(["exp", "log", "Ad", "jac_left_inv", "compose"]):
        loop = np.stack([np.asarray(out[k]) for out in loops])
        np.testing.assert_allclose(np.asarray(vms[k]), loop, atol=1e-13, err_msg=name)
        np.testing.assert_allclose(
            np.asarray(broadcasts[k]).reshape(loop.shape), loop, atol=1e-13, err_msg=name
        )
    # eager gives the same as jit
    np.testing.assert_allclose(np.asarray(G.log(g)), np.asarray(jax.jit(G.log)(g)), atol=1e-13)


def test_float32(G):
    """exp, log and J_r in float32 against the same functions in float64 at the same (float32)
    points.  Bound: each is a few dozen float32 operations on entries of size ≤ |ξ| ≤ 2.6
    (angles ≤ 3 rad, where the rotation log's 1/sin θ ≤ 7 is offset by its small numerator), so
    the error is a few eps32·|ξ|; asserted 8·eps32·max(1, |ξ|) ≈ 2.5e-6, 8× the largest error
    measured on any group (3.1e-7, SE(3) log; exp 2.6e-7, J_r 2.5e-7)."""
    xi = jnp.asarray(random_algebra(G, 11, (50,), scale=1.0, max_angle=3.0, dtype=np.float32))
    xi64 = xi.astype(jnp.float64)
    tol = 8 * np.finfo(np.float32).eps * max(1.0, float(jnp.max(jnp.abs(xi64))))
    g = G.exp(xi)
    assert g.dtype == jnp.float32
    assert G.log(g).dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(G.exp(xi64)), atol=tol)
    np.testing.assert_allclose(np.asarray(G.log(g)), np.asarray(xi), atol=tol)
    assert bool(jnp.all(G.is_member(g)))
    ref = jax.jit(_jacobians_from_forward_mode, static_argnums=0)(G, xi64)[0]
    np.testing.assert_allclose(np.asarray(G.jac_right(xi)), np.asarray(ref), atol=tol)


def test_renormalize_pulls_back_onto_the_group(G):
    """Elements are fixed points; a perturbation of size 1e-4 leaves a defect of its square or
    less (one Björck step on rotation blocks, projection elsewhere)."""
    g = jnp.asarray(random_element(G, 5, (20,)))
    np.testing.assert_allclose(np.asarray(G.renormalize(g)), np.asarray(g), atol=1e-13)
    noise = np.random.default_rng(1).standard_normal(np.shape(g))
    bad = g + 1e-4 * jnp.asarray(noise)
    before, after = G.defect(bad), G.defect(G.renormalize(bad))
    assert bool(jnp.all(after <= 10 * before**2 + 1e-13)), (before, after)
    # and it lands next to the unperturbed element (compared on the group: angles wrap)
    err = G.log(G.compose(G.inverse(g), G.renormalize(bad)))
    assert float(jnp.max(jnp.abs(err))) < 1e-3


def test_wrong_shapes_name_the_argument(G):
    with pytest.raises(ValueError, match="'xi'"):
        G.exp(jnp.zeros((4, G.dim + 1)))
    with pytest.raises(ValueError, match="'g'"):
        G.log(jnp.zeros((2, *tuple(d + 1 for d in G.element_shape))))
