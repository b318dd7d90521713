"""Rigid bodies built from plain Python inputs: lists and floats are accepted as arrays, without
a deprecation warning from JAX, and give the same body as arrays do."""

import warnings

import jax.numpy as jnp
import numpy as np

import geomjax as gj


def test_list_inertia_is_an_array_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails: JAX's deprecations included
        body = gj.RigidBody([1.0, 2.0, 3.0])
        pose = gj.RigidBodySE3(2.0, [1.0, 2.0, 3.0])
    ref = gj.RigidBody(jnp.array([1.0, 2.0, 3.0]))
    assert body.principal_axes and ref.principal_axes
    np.testing.assert_array_equal(np.asarray(body.inertia), np.asarray(ref.inertia))
    # principal moments → the diagonal inertia; SE(3): (J, m I)
    np.testing.assert_array_equal(np.diag(np.asarray(body.inertia)), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.diag(np.asarray(pose.inertia)), [1.0, 2.0, 3.0, 2.0, 2.0, 2.0])
    full = gj.RigidBody([[2.0, 0.1, 0.0], [0.1, 2.0, 0.0], [0.0, 0.0, 3.0]])
    assert not full.principal_axes
