"""The pip route, from a clean folder (CTest `install.pip`; exits 77, a skip, without PyPI torch,
pip or setuptools). `check.py WORK_DIR`:

1. copies the files the package is built from (pyproject.toml, setup.py, CMakeLists.txt,
   README.md, include/, cmake/, python/tensordict_cpp) into WORK_DIR/src, builds a wheel of it
   with pip, checks what the wheel holds, and installs it into WORK_DIR/site; `pip install` of
   the source folder itself goes to WORK_DIR/site_src;
2. `python -m tensordict_cpp --includedir/--cmakedir/--version` and `get_include()` /
   `get_cmake_dir()` from the installed package, pointing inside it;
3. a CMake project that knows only `find_package(tensordict)` (tests/install/consumer), given
   `-Dtensordict_DIR=$(python -m tensordict_cpp --cmakedir)`, configures, builds and runs;
4. a `torch.utils.cpp_extension` extension (tests/pip/ext.cpp) built with
   `include_dirs=[tensordict_cpp.get_include()]` runs a gradient step, checked against torch.
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def run(*cmd, env=None, cwd=None):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout)
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}")
    return r.stdout


def main():
    work = os.path.abspath(sys.argv[1])
    try:
        import setuptools  # noqa: F401
        import torch
        import torch.utils.cpp_extension  # noqa: F401
    except ImportError as e:
        print(f"TENSORDICT_SKIPPED: {e}")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    src = os.path.join(work, "src")
    os.makedirs(src)
    for f in ("pyproject.toml", "setup.py", "CMakeLists.txt", "README.md"):
        shutil.copy(os.path.join(ROOT, f), src)
    for d in ("include", "cmake"):
        shutil.copytree(os.path.join(ROOT, d), os.path.join(src, d))
    shutil.copytree(os.path.join(ROOT, "python", "tensordict_cpp"), os.path.join(src, "python", "tensordict_cpp"),
                    ignore=shutil.ignore_patterns("__pycache__"))

    # 1. A wheel, and what it holds.
    py = sys.executable
    dist = os.path.join(work, "dist")
    run(py, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", dist, src)
    wheels = glob.glob(os.path.join(dist, "tensordict_cpp-*.whl"))
    assert len(wheels) == 1, wheels
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    headers = [n for n in names if n.startswith("tensordict_cpp/include/tensordict/") and n.endswith(".hpp")]
    want = len(glob.glob(os.path.join(ROOT, "include", "tensordict", "**", "*.hpp"), recursive=True))
    assert len(headers) == want, f"the wheel holds {len(headers)} headers, the repository {want}"
    for n in ("tensordict_cpp/__init__.py", "tensordict_cpp/__main__.py", "tensordict_cpp/export.py",
              "tensordict_cpp/share/cmake/tensordict/tensordictConfig.cmake",
              "tensordict_cpp/share/cmake/tensordict/tensordictConfigVersion.cmake",
              "tensordict_cpp/share/cmake/tensordict/tensordictTorchWheel.cmake",
              "tensordict_cpp/share/cmake/tensordict/tensordictMujoco.cmake"):
        assert n in names, f"the wheel lacks {n}"
    print(f"wheel {os.path.basename(wheels[0])}: {len(headers)} headers, the CMake package, the helpers")
    site = os.path.join(work, "site")
    run(py, "-m", "pip", "install", "--no-deps", "-q", "--target", site, wheels[0])
    # `pip install .` of the source folder, the other route.
    site_src = os.path.join(work, "site_src")
    run(py, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "-q", "--target", site_src, src)
    assert os.path.isfile(os.path.join(site_src, "tensordict_cpp", "include", "tensordict", "tensordict.hpp"))
    assert not os.path.exists(os.path.join(src, "build")), "setuptools wrote into the source folder's build/"

    # 2. Where it is, asked as pybind11 is asked.
    env = dict(os.environ, PYTHONPATH=site)
    inc = run(py, "-m", "tensordict_cpp", "--includedir", env=env, cwd=work).strip()
    cmakedir = run(py, "-m", "tensordict_cpp", "--cmakedir", env=env, cwd=work).strip()
    ver = run(py, "-m", "tensordict_cpp", "--version", env=env, cwd=work).strip()
    api = run(py, "-c", "import tensordict_cpp as t; print(t.get_include()); print(t.get_cmake_dir())", env=env,
              cwd=work).split()
    assert api == [inc, cmakedir], (api, inc, cmakedir)
    assert inc.startswith(site) and os.path.isfile(os.path.join(inc, "tensordict", "tensordict.hpp")), inc
    assert cmakedir.startswith(site) and os.path.isfile(os.path.join(cmakedir, "tensordictConfig.cmake")), cmakedir
    print(f"python -m tensordict_cpp: version {ver}, include {inc}, cmake {cmakedir}")

    # 3. A CMake project, find_package only.
    build = os.path.join(work, "consumer")
    run("cmake", "-S", os.path.join(ROOT, "tests", "install", "consumer"), "-B", build, "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", f"-Dtensordict_DIR={cmakedir}",
        f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}")
    ninja = open(os.path.join(build, "build.ninja")).read()
    assert inc in ninja and os.path.join(ROOT, "include") not in ninja, "the consumer does not use the pip package's headers"
    run("cmake", "--build", build)
    out = run(os.path.join(build, "consumer"))
    assert "leaves=2 activation=relu" in out, out
    print("CMake consumer with find_package(tensordict) from pip:", out.strip().splitlines()[-1])

    # 4. A torch extension, headers from the installed package only.
    code = f"""
import os, sys, torch
import tensordict_cpp
from torch.utils import cpp_extension
ext = cpp_extension.load(name="tensordict_pip_ext", sources=[{os.path.join(HERE, 'ext.cpp')!r}],
                         extra_include_paths=[tensordict_cpp.get_include()],
                         build_directory={os.path.join(work, 'ext')!r}, extra_cflags=["-O1"], verbose=False)
assert tensordict_cpp.get_include().startswith({site!r})
torch.manual_seed(0)
w = [torch.randn(5, 3), torch.randn(5), torch.randn(2, 5), torch.randn(2)]
x, y = torch.randn(7, 3), torch.randn(7, 2)
got = ext.sgd_step(w, x, y, 0.1)
p = [t.clone().requires_grad_() for t in w]
loss = torch.nn.functional.mse_loss(torch.nn.functional.linear(torch.tanh(torch.nn.functional.linear(x, p[0], p[1])), p[2], p[3]), y)
loss.backward()
want = [t.detach() - 0.1 * t.grad for t in p]
err = max((a - b).abs().max().item() for a, b in zip(got, want))
assert ext.leaf_count() == 4 and ext.key(1) == "hidden.bias", (ext.leaf_count(), ext.key(1))
assert err <= 1e-6, err
print(f"cpp_extension against the pip package: {{ext.leaf_count()}} leaves, SGD step within {{err:.1e}} of torch's")
"""
    os.makedirs(os.path.join(work, "ext"), exist_ok=True)
    print(run(py, "-c", code, env=env, cwd=work).strip().splitlines()[-1])


if __name__ == "__main__":
    main()
