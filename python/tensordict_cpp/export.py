"""Serialization names for TensorDict and tensorclasses in PyTorch's pytree specs.

tensordict registers its classes as pytree nodes without a serialization name, so
``torch.export.save`` and ``torch._inductor.aoti_compile_and_package`` refuse a module that
takes or returns one ("No registered serialization name for <class
'tensordict._td.TensorDict'>"). ``register_export_types()`` gives every registered TensorDict
class and tensorclass a name and a JSON context, which the C++ side
(``tensordict/deploy/pytree.hpp``) reads:

    {"format": "tensordict-cpp/1", "class": "tensordict._td.TensorDict", "tensorclass": false,
     "keys": ["obs", "action"], "batch_size": [4] or null (a dynamic dim), "batch_dims": 1,
     "names": null or ["time"], "device": null or "cpu", "non_tensor": {"mode": "eval"}}

The same context loads back in Python (``torch._inductor.aoti_load_package``,
``torch.export.load``).
"""

from __future__ import annotations

import importlib
import json
from typing import Any

import torch
import torch.utils._pytree as pytree
from tensordict import TensorDict, TensorDictBase
from tensordict import _pytree as td_pytree
from tensordict.utils import _is_tensorclass

#: The serialized type name of ``tensordict.TensorDict`` nodes.
SERIALIZED_TENSORDICT = "tensordict._td.TensorDict"
_FORMAT = "tensordict-cpp/1"


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _resolve(name: str) -> type:
    """The class a serialized name stands for: a registered one, or one imported by its name."""
    if name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        return pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name]
    module, _, qual = name.rpartition(".")
    while module:
        try:
            obj: Any = importlib.import_module(module)
        except ImportError:
            module, _, head = module.rpartition(".")
            qual = f"{head}.{qual}"
            continue
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj
    raise ValueError(f"tensordict_cpp: cannot find the class {name!r} of a pytree node")


def _json_value(cls: type, key: str, value: Any) -> Any:
    try:
        json.dumps(value)
    except TypeError as e:
        raise TypeError(
            f"tensordict_cpp: the non-tensor field {key!r} of {_class_name(cls)} is a "
            f"{type(value).__name__}, which has no JSON form: an exported pytree spec can hold "
            "only JSON values (str, int, float, bool, None, lists and dicts of them)"
        ) from e
    return value


def _to_context(context: dict) -> str:
    cls = context["cls"]
    if "batch_size" in context:
        bs = context["batch_size"]
        batch_dims = bs.batch_dims
        batch_size = None if bs.batch_size is None else [int(d) for d in bs.batch_size]
    else:  # flattened while Dynamo traced: the sizes may be symbolic
        batch_dims = int(context["batch_dims"])
        batch_size = None
    non_tensor = context["non_tensor_data"]
    if isinstance(non_tensor, tuple):
        items = []
        for key, value in non_tensor:
            if isinstance(value, td_pytree._PytreeNonTensorStack):
                raise TypeError(
                    f"tensordict_cpp: the entry {key!r} of a {_class_name(cls)} is a "
                    "NonTensorStack, which an exported pytree spec cannot hold"
                )
            items.append([key, _json_value(cls, key, value)])
        non_tensor = {"items": items}
    else:
        non_tensor = {"fields": {k: _json_value(cls, k, v) for k, v in non_tensor.items()}}
    device = context["device"]
    return json.dumps(
        {
            "format": _FORMAT,
            "class": _class_name(cls),
            "tensorclass": bool(_is_tensorclass(cls)),
            "keys": list(context["keys"]),
            "batch_size": batch_size,
            "batch_dims": batch_dims,
            "names": None if context["names"] is None else list(context["names"]),
            "device": None if device is None else str(device),
            "non_tensor": non_tensor,
        }
    )


def _from_context(text: str) -> dict:
    c = json.loads(text)
    if not isinstance(c, dict) or c.get("format") != _FORMAT:
        raise ValueError(f"tensordict_cpp: not a {_FORMAT} pytree context: {text[:200]!r}")
    cls = _resolve(c["class"])
    nt = c["non_tensor"]
    if "items" in nt:
        non_tensor: Any = tuple((k, v) for k, v in nt["items"])
    else:
        non_tensor = dict(nt["fields"])
    context = {
        "keys": list(c["keys"]),
        "names": c["names"],
        "device": None if c["device"] is None else torch.device(c["device"]),
        "constructor": td_pytree._constructor(cls),
        "non_tensor_data": non_tensor,
        "cls": cls,
    }
    if c["batch_size"] is None:
        context["batch_dims"] = int(c["batch_dims"])
    else:
        context["batch_size"] = td_pytree._PytreeBatchSize(torch.Size(c["batch_size"]))
    return context


def _register(cls: type, name: str) -> None:
    node = pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
    if node is not None and node.serialized_type_name == name:
        return
    pytree.SUPPORTED_SERIALIZED_TYPES[cls] = pytree._SerializeNodeDef(
        cls, name, _to_context, _from_context
    )
    pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name] = cls


def register_export_types(*classes: type) -> None:
    """Gives TensorDict, each tensorclass and each TensorDict subclass registered as a pytree
    node so far (and ``classes``) a serialization name: call it after defining the
    tensorclasses a module takes or returns, before ``torch.export.save`` or
    ``aoti_compile_and_package``. Lazy stacks are not supported by the C++ side and keep
    tensordict's own registration."""
    for cls in list(pytree.SUPPORTED_NODES) + list(classes):
        if not isinstance(cls, type):
            continue
        if _is_tensorclass(cls) or (
            issubclass(cls, TensorDictBase) and cls in td_pytree.PYTREE_REGISTERED_TDS
        ):
            if cls not in pytree.SUPPORTED_NODES:
                td_pytree._register_td_node(cls)
            _register(cls, SERIALIZED_TENSORDICT if cls is TensorDict else _class_name(cls))


def _signature(value: Any) -> dict | None:
    if not isinstance(value, torch.Tensor):
        return None
    shape = [int(d) if isinstance(d, int) else None for d in value.shape]
    return {"dtype": str(value.dtype), "shape": shape, "device": str(value.device)}


def leaf_signatures(exported: torch.export.ExportedProgram) -> dict[str, str]:
    """The metadata the C++ side checks each call against: every flat input's and output's
    dtype, shape (a dynamic dim is null) and device, under ``tensordict_cpp.inputs`` and
    ``tensordict_cpp.outputs``. Left out where a flat input or output is not a tensor."""
    nodes = {n.name: n for n in exported.graph.nodes}
    out: dict[str, str] = {}
    ins = [_signature(nodes[name].meta.get("val")) for name in exported.graph_signature.user_inputs]
    if all(s is not None for s in ins):
        out["tensordict_cpp.inputs"] = json.dumps({"leaves": ins})
    output = next(n for n in exported.graph.nodes if n.op == "output")
    results = output.args[0]
    n_user = len(exported.graph_signature.user_outputs)
    outs = [_signature(getattr(r, "meta", {}).get("val")) for r in list(results)[-n_user:]] if n_user else []
    if all(s is not None for s in outs):
        out["tensordict_cpp.outputs"] = json.dumps({"leaves": outs})
    return out


def aoti_package(module: torch.nn.Module, args: tuple, path: str, *, kwargs: dict | None = None,
                 dynamic_shapes: Any = None, keep_constants: bool = True, **inductor_configs) -> str:
    """Exports ``module`` on ``args``/``kwargs`` and packages it with AOTInductor at ``path``
    (a ``.pt2``). ``keep_constants`` keeps every parameter and buffer a package constant, so
    that the C++ side can read and swap all of them (Inductor otherwise folds small ones into
    its kernels)."""
    register_export_types()
    exported = torch.export.export(module, args, kwargs=kwargs, dynamic_shapes=dynamic_shapes)
    configs = dict(inductor_configs)
    if keep_constants:
        configs.setdefault("always_keep_tensor_constants", True)
    metadata = dict(configs.get("aot_inductor.metadata", {}))
    metadata.update(leaf_signatures(exported))
    configs["aot_inductor.metadata"] = metadata
    return torch._inductor.aoti_compile_and_package(
        exported, package_path=path, inductor_configs=configs
    )


register_export_types()
