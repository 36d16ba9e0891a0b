"""Python helpers of tensordict-cpp: what Python needs so that C++ programs built on the
library can run what Python exported (see docs/deploy.md)."""

from .export import (  # noqa: F401
    SERIALIZED_TENSORDICT,
    aoti_package,
    register_export_types,
)
