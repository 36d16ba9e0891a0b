#!/usr/bin/env bash
# Compile time and peak memory of a translation unit that includes the library, side by side
# with one that includes <torch/torch.h> alone (the same function written by hand), as a user
# would build it (g++ -std=c++20 -O2 -c). REPS rounds (3 by default), each compiling every
# file once in turn, so that a change in the machine's load falls on all of them alike; the
# figures are medians over the rounds, and "vs torch only" is the median of each round's ratio
# (CPU time: user + system).
#
#   bench/compile_time.sh [REPS]          # a Markdown table; the figures in $OUT (compile_time.json)
#
# TORCH_INCLUDES overrides the libtorch include flags (default: Debian's libtorch); OPT the
# optimization flag (default -O2).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
reps="${1:-3}"
cxx="${CXX:-g++}"
torch_inc="${TORCH_INCLUDES:--I/usr/include/torch/csrc/api/include}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# The same model and the same step in each: a two-layer MLP, and w - 0.1 * g on every leaf.
model='struct Linear { torch::Tensor weight, bias; std::string activation; };
struct MLP { Linear hidden, out; };'
hand='MLP step(const MLP& p, const MLP& g) {
  return {{p.hidden.weight - 0.1 * g.hidden.weight, p.hidden.bias - 0.1 * g.hidden.bias, p.hidden.activation},
          {p.out.weight - 0.1 * g.out.weight, p.out.bias - 0.1 * g.out.bias, p.out.activation}};
}'
lib='MLP step(const MLP& p, const MLP& g) {
  return tensordict::apply(p, [](const torch::Tensor& w, const torch::Tensor& d) { return w - 0.1 * d; }, g);
}'
wide_fields=$(for i in $(seq 0 199); do printf 'torch::Tensor f%d; ' "$i"; done)

printf '#include <string>\n#include <torch/torch.h>\n%s\n%s\n' "$model" "$hand" > "$work/torch_only.cpp"
printf '#include <torch/torch.h>\n#include <tensordict/core.hpp>\n%s\n%s\n' "$model" "$lib" > "$work/core.cpp"
printf '#include <torch/torch.h>\n#include <tensordict/tensordict.hpp>\n%s\n%s\n' "$model" "$lib" > "$work/umbrella.cpp"
printf '#include <torch/torch.h>\n#include <tensordict/core.hpp>\n#include <tensordict/wide.hpp>\nstruct Wide { %s };\n%s\n' "$wide_fields" \
  'Wide step(const Wide& p, const Wide& g) {
  return tensordict::apply(p, [](const torch::Tensor& w, const torch::Tensor& d) { return w - 0.1 * d; }, g);
}' > "$work/wide200.cpp"

median() { sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
tus="torch_only core umbrella wide200"
for tu in $tus; do : > "$work/$tu.times"; done
for r in $(seq "$reps"); do
  for tu in $tus; do
    /usr/bin/time -f '%e %U %S %M' -o "$work/$tu.one" \
      "$cxx" -std=c++20 "${OPT:--O2}" -c -I"$root/include" $torch_inc "$work/$tu.cpp" -o "$work/$tu.o"
    awk -v r="$r" '{print r, $1, $2 + $3, $4}' "$work/$tu.one" >> "$work/$tu.times"
  done
done
json="["
printf '| translation unit | wall (s) | CPU (s) | peak memory (MiB) | CPU vs torch only |\n|---|---|---|---|---|\n'
for tu in $tus; do
  wall=$(awk '{print $2}' "$work/$tu.times" | median)
  cpu=$(awk '{print $3}' "$work/$tu.times" | median)
  mem=$(awk '{print $4}' "$work/$tu.times" | median)
  mib=$(awk -v k="$mem" 'BEGIN {printf "%.0f", k / 1024}')
  ratio=$(awk 'NR == FNR {base[$1] = $3; next} {printf "%.4f\n", $3 / base[$1]}' \
    "$work/torch_only.times" "$work/$tu.times" | median)
  ratio=$(awk -v r="$ratio" 'BEGIN {printf "%.2f", r}')
  printf '| %s | %s | %s | %s | %s |\n' "$tu" "$wall" "$cpu" "$mib" "$ratio"
  json+="{\"tu\": \"$tu\", \"wall_s\": $wall, \"cpu_s\": $cpu, \"peak_mib\": $mib, \"vs_torch_only\": $ratio},"
done
echo "${json%,}]" > "${OUT:-compile_time.json}"
