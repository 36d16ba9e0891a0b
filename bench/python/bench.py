"""Side by side, in one run: the cost of crossing into a C++ function and back with
<tensordict/python.hpp>, an Adam step over a TensorDict from Python against torch.optim.Adam,
and the GAE example against its Python reference. `python3 bench/python/bench.py [BUILD_DIR]`;
medians of 7 runs. See docs/benchmarks.md."""

import os
import statistics
import sys
import time

import torch
from tensordict import TensorDict
from torch.utils import cpp_extension

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "examples", "python_extension"))
import run as gae_example  # noqa: E402


def median_us(f, n=2000, reps=7):
    for _ in range(n // 10):
        f()
    xs = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(n):
            f()
        xs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(xs)


def nested_td(levels=8, leaves=8):
    d, cur = {}, None
    cur = d
    for level in range(levels):
        for i in range(leaves):
            cur[f"x{i}"] = torch.zeros(4)
        if level < levels - 1:
            cur["sub"] = {}
            cur = cur["sub"]
    return TensorDict(d, batch_size=[4])


def nested_struct(m, depth=0):
    fields = {f"x{i}": torch.zeros(4) for i in range(8)}
    if depth < 7:
        fields["sub"] = nested_struct(m, depth + 1)
    return getattr(m, f"Level{depth}")(**fields, batch_size=[])


def main():
    build_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "python_bench")
    os.makedirs(build_dir, exist_ok=True)
    m = cpp_extension.load(name="tensordict_bench_ext", sources=[os.path.join(ROOT, "bench", "python", "bench_ext.cpp")],
                           extra_include_paths=[os.path.join(ROOT, "include")], extra_cflags=["-O2"],
                           build_directory=build_dir)
    print(f"torch {torch.__version__}, tensordict {__import__('tensordict').__version__}; median us")
    td = nested_td()
    assert len(list(td.keys(True, True))) == 64
    leaves = [v for _, v in td.items(True, True)]
    rows = []
    m.set_fast_path(True)
    rows.append(("TensorDict, 64 leaves in 8 levels: in and out (storage)", median_us(lambda: m.identity(td))))
    rows.append(("  in only (storage)", median_us(lambda: m.take(td))))
    m.set_fast_path(False)
    rows.append(("TensorDict in and out (public API)", median_us(lambda: m.identity(td))))
    m.set_fast_path(True)
    rows.append(("Python's own td.apply(lambda x: x)", median_us(lambda: td.apply(lambda x: x))))
    rows.append(("list of 64 tensors in and out", median_us(lambda: m.identity_list(leaves))))
    s = nested_struct(m)
    rows.append(("struct of 8 nested tensorclasses (64 leaves): in and out", median_us(lambda: m.identity_struct(s))))
    m.set_fast_path(False)
    rows.append(("  the same through a C++ TensorDict and the public API", median_us(lambda: m.identity_struct(s))))
    m.set_fast_path(True)

    def rebuild(x):  # each nested instance rebuilt with tensordict's _from_tensordict
        inner = x._tensordict
        return type(x)._from_tensordict(inner.apply(lambda t: t, is_leaf=lambda c: c is torch.Tensor))

    rows.append(("  Python: rebuild it with _from_tensordict", median_us(lambda: rebuild(s), n=500)))
    for name, us in rows:
        print(f"{name:<62} {us:9.1f}")
    print(f"ratio storage in+out / Python apply: {rows[0][1] / rows[3][1]:.2f}")

    # Adam: 64 parameters of mixed sizes (0.33 M floats).
    g = torch.Generator().manual_seed(0)
    shapes = [(256, 64), (64,), (64, 64), (64,)] * 16
    params = [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)
    p_td = TensorDict({f"p{i}": p.detach().clone() for i, p in enumerate(params)})
    g_td = TensorDict({f"p{i}": p.grad for i, p in enumerate(params)})
    opt = torch.optim.Adam(params, lr=1e-3, foreach=True)
    cpp = m.Adam(p_td, 1e-3)
    t_py = median_us(opt.step, n=100)
    t_cpp = median_us(lambda: cpp.step(p_td, g_td), n=100)
    print(f"Adam step, 64 tensors ({sum(p.numel() for p in params) / 1e6:.2f} M floats): "
          f"torch.optim.Adam(foreach=True) {t_py:.0f} us, td::optim::adam from Python {t_cpp:.0f} us "
          f"({t_py / t_cpp:.2f}x)")

    gae = gae_example.load(os.path.join(build_dir, "gae"))
    for T in (1000, 10000):
        r = gae_example.rollout(T, 32)
        cpp = gae_example.median_ms(lambda: gae.gae(r), 15)
        py = gae_example.median_ms(lambda: gae_example.gae_reference(r), 5)
        print(f"GAE T={T:>5} B=32: C++ {cpp:.3f} ms, Python reference {py:.2f} ms ({py / cpp:.0f}x)")


if __name__ == "__main__":
    main()
