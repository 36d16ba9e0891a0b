"""Builds gae.cpp with torch.utils.cpp_extension, checks it against a Python reference on
rollouts of several shapes and dtypes, and times both: `python3 run.py [BUILD_DIR]`, or
`python3 run.py --built DIR` with the module setup.py built into DIR."""

import os
import statistics
import sys
import time

try:
    import torch
    from tensordict import TensorDict
    from torch.utils import cpp_extension
except ImportError as e:  # CTest reads 77 as a skip
    print(f"skipped: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))


def load(build_dir):
    os.makedirs(build_dir, exist_ok=True)
    return cpp_extension.load(
        name="gae_ext",
        sources=[os.path.join(HERE, "gae.cpp")],
        extra_include_paths=[os.path.join(HERE, "..", "..", "include")],
        extra_cflags=["-O2"],
        build_directory=build_dir,
    )


def gae_reference(rollout, gamma=0.99, lmbda=0.95):
    """GAE as TorchRL's generalized_advantage_estimate computes it, time first: [T, B]."""
    reward, done = rollout["reward"], rollout["done"]
    value, next_value = rollout["value"], rollout["next_value"]
    not_done = (~done).to(reward.dtype)
    delta = reward + gamma * next_value * not_done - value
    adv = torch.empty_like(reward)
    running = torch.zeros_like(reward[0])
    for t in reversed(range(reward.shape[0])):
        running = delta[t] + gamma * lmbda * not_done[t] * running
        adv[t] = running
    out = rollout.clone(False)
    out["advantage"] = adv
    out["value_target"] = adv + value
    return out


def rollout(T, B, dtype=torch.float32, extra=()):
    g = torch.Generator().manual_seed(T * 7 + B)
    shape = (T, B) + tuple(extra)
    return TensorDict(
        reward=torch.randn(shape, generator=g).to(dtype),
        done=torch.rand(shape, generator=g) < 0.05,
        value=torch.randn(shape, generator=g).to(dtype),
        next_value=torch.randn(shape, generator=g).to(dtype),
        batch_size=[T, B],
    )


def median_ms(f, reps):
    f()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        f()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    args = sys.argv[1:]
    if args[:1] == ["--built"]:  # the module setup.py built, in args[1]
        sys.path.insert(0, args[1])
        import gae_ext as ext
    else:
        ext = load(args[0] if args else os.path.join(HERE, "build"))
    # Equal to the reference: dtypes, shapes (a trailing dim), gammas, one step and many.
    for dtype, tol in ((torch.float32, 1e-4), (torch.float64, 1e-10), (torch.bfloat16, 5e-2)):
        for T, B, extra in ((1, 1, ()), (7, 3, ()), (100, 16, (2,)), (1000, 8, ())):
            for gamma, lmbda in ((0.99, 0.95), (1.0, 1.0), (0.5, 0.0)):
                r = rollout(T, B, dtype, extra)
                want = gae_reference(r, gamma, lmbda)
                got = ext.gae(r, gamma, lmbda)
                for key in ("advantage", "value_target"):
                    err = (got[key].double() - want[key].double()).abs().max().item()
                    assert err <= tol * max(1.0, want[key].double().abs().max().item()), (dtype, T, B, key, err)
                assert got.batch_size == r.batch_size and got["reward"] is r["reward"]
    try:
        ext.gae(TensorDict(reward=torch.zeros(3), batch_size=[3]))
        raise AssertionError("a rollout without 'done' was accepted")
    except KeyError as e:
        assert "'done'" in str(e)
    print("gae: equal to the Python reference (float32, float64, bfloat16; 12 shapes and gammas each)")
    for T in (1000, 10000):
        r = rollout(T, 32)
        cpp = median_ms(lambda: ext.gae(r), 15)
        py = median_ms(lambda: gae_reference(r), 5)
        print(f"T={T:>5} B=32: C++ {cpp:.3f} ms, Python {py:.2f} ms ({py / cpp:.0f}x)")


if __name__ == "__main__":
    main()
