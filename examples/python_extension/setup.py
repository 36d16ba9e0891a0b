"""Builds gae.cpp ahead of time, as a package's extension is built:
`python3 setup.py build_ext --inplace` (then `import gae_ext`). run.py builds the same module
just in time with torch.utils.cpp_extension.load; `run.py --built DIR` uses this one."""

import os

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

HERE = os.path.dirname(os.path.abspath(__file__))

setup(
    name="gae_ext",
    ext_modules=[
        CppExtension(
            "gae_ext",
            [os.path.join(HERE, "gae.cpp")],
            include_dirs=[os.path.join(HERE, "..", "..", "include")],  # this library's headers
            extra_compile_args=["-O2"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
