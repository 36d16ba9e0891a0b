#!/bin/bash
# The headers need nlohmann/json only where it is installed: with every include folder that
# holds it hidden, the umbrella compiles and converts values to and from Json by itself.
# Usage: without_nlohmann.sh CXX SOURCE_INCLUDE [TORCH_INCLUDE...]
set -euo pipefail
cxx=$1 src=$2
shift 2
farm=$(mktemp -d)
trap 'rm -rf "$farm"' EXIT
# The folder `dir` as the compiler sees it, less nlohmann/: a folder of links beside it.
hide() {
  local dir=$1
  if [ -d "$dir/nlohmann" ]; then
    local out
    out="$farm/$(echo "$dir" | tr / _)"
    if [ ! -d "$out" ]; then
      mkdir -p "$out"
      for e in "$dir"/*; do [ "$(basename "$e")" = nlohmann ] || ln -s "$e" "$out/"; done
    fi
    echo "$out"
  else
    echo "$dir"
  fi
}
# The compiler's own folders, and before them the given ones that are not among them (as
# -isystem puts them; /usr/include again there would break libstdc++'s #include_next).
mapfile -t own < <("$cxx" -std=c++20 -xc++ -E -v - </dev/null 2>&1 |
  sed -n '/#include <...> search starts here:/,/End of search list./p' | grep '^ ' |
  sed 's/^ *//; s/ (framework directory)//' | xargs -n1 realpath)
flags=(-nostdinc)
for d in "$@"; do
  r=$(realpath "$d")
  printf '%s\n' "${own[@]}" | grep -qxF "$r" || flags+=(-isystem "$(hide "$d")")
done
for d in "${own[@]}"; do flags+=(-isystem "$(hide "$d")"); done
cat > "$farm/use.cpp" <<'CPP'
#if __has_include(<nlohmann/json_fwd.hpp>) || __has_include(<nlohmann/json.hpp>)
#error "nlohmann/json is still visible: the check would prove nothing"
#endif
#include <map>
#include <optional>
#include <string>
#include <vector>
#include <tensordict/tensordict.hpp>
int main() {
  const tensordict::Json j(std::map<std::string, std::vector<std::optional<int>>>{{"a", {1, std::nullopt}}});
  const auto back = j.get<std::map<std::string, std::vector<std::optional<int>>>>();
  tensordict::TensorDict td{{"note", "text"}};
  return back.at("a").size() == 2 && td.get<std::string>("note") == "text" ? 0 : 1;
}
CPP
"$cxx" -std=c++20 -fsyntax-only "${flags[@]}" -I "$src" "$farm/use.cpp"
echo "the umbrella compiles without nlohmann/json"
