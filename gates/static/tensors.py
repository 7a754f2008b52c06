"""What torch calls and tensor methods do to abstract values: shapes, which axis holds the
batch's rows, reductions over rows (row-mixing) or along them (vendor reductions), GEMMs."""

from __future__ import annotations

import ast

from gates.static import ops
from gates.static.facts import TorchOp, short
from gates.static.kernels import dotted
from gates.static.values import CLEAN, NOCONST, Obj, Origin, Val, combine, flat_batch, replace

SCALAR_METHODS = {"element_size", "data_ptr", "is_contiguous", "is_floating_point", "get_device",
                  "storage_offset", "is_complex", "is_signed", "nbytes", "itemsize"}


class TensorSemantics:
    """Mixin of the host reader: the torch part of its abstract interpretation."""

    facts: object

    # -- tensors -----------------------------------------------------------------------------
    def dim(self, t: Val, i: int, line: int) -> Val:
        if t.dims is not None and -len(t.dims) <= i < len(t.dims):
            return t.dims[i]
        if t.rows and i == (t.row_axis or 0):
            return Val(batch=Origin(line, f"{t.rows}.shape[{i}]", row_count=True))
        return CLEAN

    def shape_of(self, t: Val, line: int) -> Val:
        if t.dims is not None:
            return Val(elts=t.dims)
        return Val(obj=Obj("<shape>", {"of": t}))

    def transposed(self, t: Val, a: int = 0, b: int = 1) -> Val:
        dims = list(t.dims) if t.dims is not None else None
        if dims is not None and len(dims) >= 2:
            a, b = a % len(dims), b % len(dims)
            dims[a], dims[b] = dims[b], dims[a]
        axis = t.row_axis
        if axis is not None:
            axis = b if axis == a else (a if axis == b else axis)
        return replace(t, dims=tuple(dims) if dims is not None else None, row_axis=axis)

    def new_shape(self, t: Val, shape: list[Val]) -> tuple[Val, ...]:
        """Extents after `view`/`reshape`: a -1 absorbs the batch when no explicit extent takes it."""
        explicit = sum(1 for s in shape if flat_batch(s))
        owned = sum(1 for d in (t.dims or ()) if flat_batch(d)) if t.dims is not None else int(bool(t.rows))
        out = []
        for s in shape:
            if s.known and s.const == -1:
                origin = next((flat_batch(d) for d in (t.dims or ()) if flat_batch(d)), None)
                if origin is None and t.rows:
                    origin = Origin(0, f"{t.rows}.shape[0]", row_count=True)
                out.append(Val(batch=origin) if owned > explicit else CLEAN)
            else:
                out.append(s)
        return tuple(out)

    def reduction(self, leaf: str, t: Val, dim: Val | None, keepdim: bool, node: ast.Call) -> Val:
        rank = len(t.dims) if t.dims is not None else None
        if dim is None or (dim.known and dim.const is None):
            axes = None if leaf not in ops.SHAPE_KEEPING else ([rank - 1] if rank else [-1])
        elif dim.known and isinstance(dim.const, int):
            axes = [dim.const]
        elif dim.elts is not None and all(e.known and isinstance(e.const, int) for e in dim.elts):
            axes = [e.const for e in dim.elts]
        else:
            axes = [-1]
        if axes is not None and rank:
            axes = [a % rank for a in axes]
        row_axis = t.row_axis if t.row_axis is not None else 0
        over_rows = bool(t.rows) and (axes is None or row_axis in axes)
        keeps = leaf in ops.SHAPE_KEEPING
        if over_rows:
            origin = Origin(node.lineno, short(node))
            if t.integer or leaf in {"argmax", "argmin"} and t.integer:
                return Val(tensor=True, integer=True, batch=origin, dims=())
            return Val(tensor=True, mixed=origin, rows=t.rows if keeps else None,
                       dims=t.dims if keeps else ())
        if leaf in ops.REDUCTIONS and t.rows and not t.integer:
            self.facts.torch_ops.append(TorchOp(leaf, node.lineno, "reduction", t.rows))
        dims = t.dims
        if dims is not None and axes is not None and not keeps and not keepdim:
            dims = tuple(d for i, d in enumerate(dims) if i not in axes)
        integer = t.integer or leaf in {"argmax", "argmin", "argsort", "count_nonzero"}
        return replace(t, dims=dims, integer=integer, const=NOCONST)

    def dim_arg(self, args: list[Val], kwargs: dict[str, Val], pos: int | None) -> Val | None:
        for name in ("dim", "axis"):
            if name in kwargs:
                return kwargs[name]
        if pos is not None and len(args) > pos:
            return args[pos]
        return None

    def torch_call(self, leaf: str, args: list[Val], kwargs: dict[str, Val], node: ast.Call,
                   receiver: Val | None = None) -> Val:
        """A torch function (receiver None) or a tensor method."""
        self.torch_effect(leaf)
        operands = ([receiver] if receiver is not None else []) + args
        if leaf not in ops.ALLOCATORS:  # torch.cat(parts), torch.stack([a, b]): the tensors inside
            operands = [e for a in operands for e in
                        (a.elts if a.elts and not a.tensor and any(v.tensor for v in a.elts) else (a,))]
        tensors = [a for a in operands if a.tensor]
        if leaf in ops.ALLOCATORS:
            shape = args[0].elts if len(args) == 1 and args[0].elts is not None else tuple(args)
            if leaf in {"full", "new_full"} and len(args) >= 2:
                shape = args[0].elts or (args[0],)
            if leaf == "arange":
                shape = (combine(args),)
            origin = flat_batch(shape[0]) if shape else None
            integer = leaf in {"arange", "randint"}
            rows = f"a buffer of {origin.text} rows" if origin and origin.row_count else None
            return Val(tensor=True, dims=tuple(shape), rows=rows, integer=integer)
        if leaf in ops.LIKE and operands:
            return replace(operands[0], mixed=None, batch=None, const=NOCONST)
        if leaf in ops.GEMMS:
            rows = next((t for t in tensors if t.rows), None)
            if rows is not None:
                self.facts.torch_ops.append(TorchOp(leaf, node.lineno, "gemm", rows.rows or ""))
            out = combine(operands)
            return replace(out, dims=(rows.dims[0],) + (CLEAN,) if rows and rows.dims else out.dims)
        if leaf in ops.REDUCTIONS or leaf in ops.EXACT:
            if not tensors or (leaf in {"max", "min"} and len(tensors) > 1):
                return combine(operands)
            pos = ops.REDUCTIONS.get(leaf, ops.EXACT.get(leaf))
            if pos is not None and receiver is None:
                pos += 1
            keep = kwargs.get("keepdim", CLEAN)
            base = operands[0] if operands[0].tensor else tensors[0]
            dim = self.dim_arg(operands if receiver is None else args, kwargs, pos)
            out = self.reduction(leaf, base, dim, bool(keep.known and keep.const), node)
            return out if not base.mixed else replace(out, mixed=base.mixed)
        if receiver is not None:
            return self.tensor_method(leaf, receiver, args, kwargs, node)
        out = combine(operands)
        if leaf in ops.FLOAT_CASTS:
            out = replace(out, integer=False)
        return out

    def tensor_method(self, leaf: str, t: Val, args: list[Val], kwargs: dict[str, Val],
                      node: ast.Call) -> Val:
        line = node.lineno
        if leaf == "size":
            if args and args[0].known and isinstance(args[0].const, int):
                return self.dim(t, args[0].const, line)
            return self.shape_of(t, line)
        if leaf == "stride":
            if t.dims is not None and args and args[0].known and isinstance(args[0].const, int):
                return combine(t.dims[args[0].const + 1:] if args[0].const != -1 else ())
            return CLEAN
        if leaf in {"numel", "nelement"}:
            if t.dims is not None:
                return combine(t.dims)
            return Val(batch=Origin(line, f"{t.rows}.numel()", row_count=True)) if t.rows else CLEAN
        if leaf in SCALAR_METHODS:  # facts about the tensor, not values computed from its rows
            return CLEAN
        if leaf in {"dim", "ndimension"}:
            return Val(const=len(t.dims)) if t.dims is not None else CLEAN
        if leaf in {"item", "tolist", "__int__", "__float__"}:
            return Val(batch=t.batch, mixed=t.mixed)
        if leaf in {"view", "reshape"}:
            shape = args[0].elts if len(args) == 1 and args[0].elts is not None else args
            if len(args) == 1 and args[0].elts is None and not args[0].known:
                return t  # view(dtype) or an unknown shape
            return replace(t, dims=self.new_shape(t, list(shape)), row_axis=0 if t.rows else t.row_axis)
        if leaf == "flatten" and not args:
            return replace(t, dims=(combine(t.dims or ()) if t.dims is not None else self.dim(t, 0, line),),
                           row_axis=0)
        if leaf in {"t", "transpose", "swapaxes"}:
            a, b = 0, 1
            if len(args) >= 2 and args[0].known and args[1].known:
                a, b = args[0].const, args[1].const
            return self.transposed(t, a, b)
        if leaf == "permute":
            order = args[0].elts if len(args) == 1 and args[0].elts is not None else args
            if t.dims is not None and all(o.known for o in order) and len(order) == len(t.dims):
                idx = [o.const % len(t.dims) for o in order]
                axis = idx.index(t.row_axis) if t.row_axis in idx else t.row_axis
                return replace(t, dims=tuple(t.dims[i] for i in idx), row_axis=axis)
            return t
        if leaf == "unsqueeze" and args and args[0].known and t.dims is not None:
            d = args[0].const % (len(t.dims) + 1)
            dims = t.dims[:d] + (CLEAN,) + t.dims[d:]
            axis = t.row_axis + 1 if t.row_axis is not None and d <= t.row_axis else t.row_axis
            return replace(t, dims=dims, row_axis=axis)
        if leaf in {"new_empty", "new_zeros", "new_ones"}:
            return self.torch_call(leaf, args, kwargs, node)
        if leaf in {"long", "int", "short"}:
            return replace(t, integer=True)
        if leaf in ops.FLOAT_CASTS:
            return replace(t, integer=False)
        if leaf == "to":
            dtype = next((a for a in node.args if isinstance(a, ast.Attribute)), None) or \
                next((k.value for k in node.keywords if k.arg == "dtype"), None)
            name = dotted(dtype) if dtype is not None else ""
            if name:
                return replace(t, integer=name.split(".")[-1] in ops.INTEGER_DTYPES)
            return t
        return replace(combine([t, *args, *kwargs.values()]), dims=t.dims, rows=t.rows, row_axis=t.row_axis,
                       integer=t.integer, tensor=True)

    def tensor_index(self, t: Val, index: ast.expr, env: dict[str, Val]) -> Val:
        items = index.elts if isinstance(index, ast.Tuple) else [index]
        dims = list(t.dims) if t.dims is not None else None
        out: list[Val] = []
        axis, row_axis, rows = 0, t.row_axis, t.rows
        extra = []
        for item in items:
            if isinstance(item, ast.Constant) and item.value is None:
                out.append(CLEAN)
                if row_axis is not None and axis <= row_axis:
                    row_axis += 1
                continue
            if isinstance(item, ast.Constant) and item.value is Ellipsis:
                return replace(t, mixed=t.mixed)
            value = self.expr(item, env)
            extra.append(value)
            if isinstance(item, ast.Slice):
                current = dims[axis] if dims is not None and axis < len(dims) else CLEAN
                if item.upper is not None and axis == (t.row_axis or 0):
                    origin = flat_batch(value)
                    current = Val(batch=origin) if origin else current
                    if origin and origin.row_count and rows is None:
                        rows = f"a buffer sliced to {origin.text} rows"
                out.append(current)
            elif value.tensor:
                out.append(value.dims[0] if value.dims else CLEAN)
            elif axis == t.row_axis and rows is not None:
                rows, row_axis = None, None  # one row picked out
            axis += 1
        if dims is not None:
            out += dims[axis:]
        mixed = t.mixed or next((v.mixed for v in extra if v.mixed), None)
        return replace(t, dims=tuple(out) if dims is not None else None, rows=rows,
                       row_axis=row_axis, mixed=mixed)
