#!/usr/bin/env python3
"""Draws the optimizer and arithmetic benchmarks as an SVG bar chart (no plotting library).

    scripts/plot_bench.py cpu  BENCH_OPTIM.json  OUT.svg   # bench_optim --benchmark_format=json
    scripts/plot_bench.py cuda BENCH_CUDA.json   OUT.svg   # bench_cuda 21 OUT.json
    scripts/plot_bench.py rl   BENCH_RL.json     OUT.svg   # docs/data/bench_rl.json: bench_rl and
                                                           # compare_python_rl.py side by side

Each group is one task; its bars are the medians of the ways to do it, drawn relative to the
slowest (longest bar), each labelled with its time.
"""
import json
import sys
from xml.sax.saxutils import escape

CPU_GROUPS = [
    ("Adam step, 200 leaves, 11.6 M floats", "ms", [
        ("td::optim::adam", "BM_adam_td"),
        ("torch::optim::Adam", "BM_adam_libtorch"),
        ("memcpy of the 28 B/float it moves", "BM_memcpy_adam_bytes"),
    ]),
    ("a + b, 1 000 leaves of 4 floats", "us", [
        ("a + b (fused)", "BM_add_tiny_td"),
        ("td::apply with a lambda", "BM_add_tiny_apply"),
    ]),
    ("lerp_ (soft update), 1 000 leaves", "us", [
        ("td lerp_", "BM_lerp_tiny_td"),
        ("loop of Tensor::lerp_", "BM_lerp_tiny_loop"),
    ]),
]

CUDA_GROUPS = [
    ("Adam step, 200 leaves, 11.6 M floats", "ms", [
        ("td::optim::adam (foreach)", "adam_td_ms"),
        ("td::optim::adam, fused = true", "adam_td_fused_ms"),
        ("torch::optim::Adam", "adam_torch_optim_ms"),
        ("device copy of the 28 B/float it moves", "copy_adam_bytes_ms"),
    ]),
    ("a + b, 1 000 leaves of 4 floats", "us", [
        ("a + b (foreach)", "add_tiny_td_us"),
        ("td::apply with a lambda", "add_tiny_apply_us"),
    ]),
    ("lerp_ (soft update), 1 000 leaves", "us", [
        ("td lerp_", "lerp_tiny_td_us"),
        ("loop of Tensor::lerp_", "lerp_tiny_loop_us"),
    ]),
    ("to(cuda), 1 000 leaves, 4 MB", "us", [
        ("leaf by leaf", "to_cuda_per_leaf_us"),
        ("consolidated: one transfer", "to_cuda_consolidated_us"),
        ("consolidated + pinned, non_blocking", "to_cuda_consolidated_pinned_us"),
    ]),
    ("ensemble of 32 MLPs, one batch", "us", [
        ("vmap", "ensemble_vmap_us"),
        ("loop over the members", "ensemble_loop_us"),
    ]),
]


RL_CASES = [
    ("collect 1024 frames, 8 CartPole envs, MLP policy", "ms", "collect_cartpole8_1024"),
    ("rollout of 1024 frames, SerialEnv of 2 CartPoles", "ms", "serial2_rollout_1024"),
    ("the same, ParallelEnv of 2 (C++: threads, TorchRL: processes)", "ms", "parallel2_rollout_1024"),
    ("one SAC update, 256 transitions", "ms", "sac_update_256"),
    ("one double-DQN update, 128 transitions", "us", "dqn_update_128"),
    ("one PPO update epoch, 2048 frames", "ms", "ppo_epoch_2048"),
    ("PPO loop: collect 2048 frames + 10 epochs", "ms", "ppo_loop_2048"),
    ("replay buffer: extend 64 + sample 64", "us", "rb_extend_sample_64"),
    ("the same, memory-mapped storage", "us", "rb_extend_sample_64_memmap"),
    ("prioritized: extend, sample, update 64", "us", "rb_prioritized_64"),
]


def rl_groups(doc):
    # The slower of the two C++ runs against TorchRL's run between them.
    groups, values = [], {}
    for title, unit, key in RL_CASES:
        scale = 1e-3 if unit == "ms" else 1.0
        values[f"cpp.{key}"] = max(doc["cpp_run1"][key], doc["cpp_run2"][key]) * scale
        values[f"torchrl.{key}"] = doc["torchrl"][key] * scale
        groups.append((title, unit, [("tensordict-cpp (C++)", f"cpp.{key}"), ("TorchRL (Python)", f"torchrl.{key}")]))
    return groups, values


def cpu_medians(doc):
    out = {}
    for b in doc["benchmarks"]:
        name = b["name"]
        if name.endswith("_median"):
            out[name[: -len("_median")]] = b["real_time"]
        elif b.get("run_type") == "iteration" and name not in out:
            out[name] = b["real_time"]
    return out


def svg(title, groups, values):
    width, label_w, bar_w, row_h, head_h = 900, 300, 470, 22, 26
    rows = sum(len(g[2]) for g in groups)
    height = 40 + len(groups) * (head_h + 8) + rows * row_h + 10
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="13">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="10" y="24" font-size="16" font-weight="bold">{escape(title)}</text>']
    y = 40
    palette = ["#2b6cb0", "#38a169", "#a0aec0", "#718096"]
    for name, unit, bars in groups:
        parts.append(f'<text x="10" y="{y + 18}" font-weight="bold">{escape(name)}</text>')
        y += head_h
        longest = max(values[key] for _, key in bars)
        for i, (label, key) in enumerate(bars):
            v = values[key]
            w = max(1.0, bar_w * v / longest)
            parts.append(f'<text x="20" y="{y + 15}">{escape(label)}</text>')
            parts.append(f'<rect x="{label_w}" y="{y + 3}" width="{w:.1f}" height="{row_h - 6}" '
                         f'fill="{palette[i % len(palette)]}"/>')
            parts.append(f'<text x="{label_w + w + 6:.1f}" y="{y + 15}">{v:.3g} {unit}</text>')
            y += row_h
        y += 8
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("cpu", "cuda", "rl"):
        sys.exit(__doc__)
    kind, src, dst = sys.argv[1:]
    doc = json.load(open(src))
    if kind == "cpu":
        values = cpu_medians(doc)
        groups = CPU_GROUPS
        title = "Tree arithmetic and Adam on the CPU (medians; shorter is faster)"
    elif kind == "rl":
        groups, values = rl_groups(doc)
        title = "RL in C++ against TorchRL, one thread (medians; shorter is faster)"
    else:
        values = doc["medians"]
        groups = CUDA_GROUPS
        title = "The library on a CUDA device (medians; shorter is faster)"
    missing = [key for _, _, bars in groups for _, key in bars if key not in values]
    if missing:
        sys.exit(f"{src}: no figure for {', '.join(missing)}")
    open(dst, "w").write(svg(title, groups, values))


if __name__ == "__main__":
    main()
