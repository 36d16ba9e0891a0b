#!/usr/bin/env python3
"""Draws the benchmark figures of docs/benchmarks.md as PNG pictures, from the JSON the
benchmarks print (matplotlib: `python3 -m pip install matplotlib`; a documentation tool, never a
dependency of the library or its tests).

    scripts/plot_png.py DATA_DIR OUT_DIR

DATA_DIR holds (each made by the command after it):
  bench_core.json   build/bench/bench_core --benchmark_repetitions=10 --benchmark_format=json
  bench_dict.json   build/bench/bench_dict --benchmark_repetitions=10 --benchmark_format=json
  python_dict.json  python3 bench/compare_python_dict.py
  python_io.json    python3 bench/compare_python_io.py build WORK_DIR
  python_st.json    python3 bench/compare_python_safetensors.py build/bench/bench_checkpoints WORK_DIR

Writes OUT_DIR/vs_hand.png (library / hand-written code, same binary, same run),
OUT_DIR/vs_python.png (Python tensordict's time / the C++ library's, same machine, same run) and
OUT_DIR/keys.png (get and set of one key among N, C++ and Python).
"""
import json
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def medians(path):
    out = {}
    for b in json.loads(path.read_text())["benchmarks"]:
        name = b["name"]
        if b.get("aggregate_name") == "median":
            out[b["run_name"]] = b["real_time"]
        elif b.get("run_type") == "iteration" and name not in out:
            out[name] = b["real_time"]
    return out


def bars(ax, labels, values, goal, xlabel, title, higher_is_better=False):
    """Blue bars meet the goal (dashed line), orange ones miss it."""
    y = range(len(labels))
    colors = ["#2b6cb0" if (v >= goal if higher_is_better else v <= goal) else "#c05621" for v in values]
    ax.barh(list(y), values, color=colors)
    ax.set_yticks(list(y), labels)
    ax.invert_yaxis()
    ax.axvline(goal, color="#4a5568", linestyle="--", linewidth=1)
    for i, v in enumerate(values):
        ax.text(v, i, f" {v:.2f}", va="center")
    ax.set_xlabel(xlabel)
    ax.set_title(title)


def ratio_figure(path, rows, goal, xlabel, title, higher_is_better=False):
    """One horizontal bar per (label, figures, numerator key, denominator key) row whose two
    keys the figures hold: numerator / denominator, against the goal."""
    rows = [r for r in rows if r[2] in r[1] and r[3] in r[1]]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(rows) + 1.5))
    bars(ax, [r[0] for r in rows], [r[1][r[2]] / r[1][r[3]] for r in rows], goal, xlabel, title,
         higher_is_better)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(data, out):
    out.mkdir(parents=True, exist_ok=True)
    core, dic = medians(data / "bench_core.json"), medians(data / "bench_dict.json")

    pairs = [
        ("apply, struct of 64 leaves", core, "BM_apply_struct", "BM_apply_hand"),
        ("flatten + unflatten, 64 leaves", core, "BM_flatten_unflatten_struct", "BM_flatten_unflatten_hand"),
        ("apply, std::vector of 12 blocks", core, "BM_apply_vector", "BM_apply_vector_hand"),
        ("leaves of the vector tree", core, "BM_leaves_vector", "BM_leaves_vector_hand"),
        ("TensorDict apply, 100 keys", dic, "BM_apply_tensordict", "BM_apply_hand_loop"),
        ("TensorDict identity apply", dic, "BM_identity_method", "BM_identity_hand_tensordict"),
        ("TensorDict get, 1 000 keys", dic, "BM_get_tensordict/1000", "BM_get_unordered_map/1000"),
    ]
    ratio_figure(out / "vs_hand.png", pairs, 1.05, "library time / hand-written time (median; 1 = the same)",
                 "The library against hand-written code")

    io = json.loads((data / "python_io.json").read_text())
    st = json.loads((data / "python_st.json").read_text())
    py = [
        ("memmap save, 1 GiB (not flushed)", io, "python_save_ms", "cpp_save_nosync_ms"),
        ("memmap load, 1 GiB", io, "python_load_ms", "cpp_load_ms"),
        ("memmap load, 10 000 leaves", io, "python_load_10k_leaves_ms", "cpp_load_10k_leaves_ms"),
        ("safetensors load, 1 GiB", st, "python_load_file_ms", "cpp_load_ms"),
    ]
    ratio_figure(out / "vs_python.png", py, 1.0, "Python's time / C++'s time (median; above 1: C++ is faster)",
                 "The library against Python tensordict and safetensors", higher_is_better=True)

    pyd = json.loads((data / "python_dict.json").read_text())
    ns = [10, 1000, 10000]
    fig, ax = plt.subplots(figsize=(8, 4.5))
    series = [
        ("TensorDict get", [dic.get(f"BM_get_tensordict/{n}") for n in ns], "-o"),
        ("TensorDict set", [dic.get(f"BM_set_tensordict/{n}") for n in ns], "-s"),
        ("std::unordered_map get", [dic.get(f"BM_get_unordered_map/{n}") for n in ns], "--o"),
        ("Python tensordict get", [pyd.get(f"python_get_ns/{n}") for n in ns], ":o"),
        ("Python tensordict set", [pyd.get(f"python_set_ns/{n}") for n in ns], ":s"),
    ]
    for label, ys, style in series:
        if all(y is not None for y in ys):
            ax.plot(ns, ys, style, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("keys in the TensorDict")
    ax.set_ylabel("ns per call (median)")
    ax.set_title("One key among N: cost as the dict grows")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "keys.png", dpi=110)


if __name__ == "__main__":
    main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
