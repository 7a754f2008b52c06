"""Kernels made by applying decorators as calls (`k2 = triton.autotune(...)(k)`, `k = triton.jit(f)`):
each is the kernel it wraps, with the autotune configs and heuristics of the calls around it."""

from __future__ import annotations

import ast
from dataclasses import replace

from gates.static.configs import read_autotune, read_heuristics
from gates.static.kernel_reader import read_kernel
from gates.static.kernels import KernelInfo, dotted


def read_kernel_aliases(tree: ast.Module, kernels: dict[str, KernelInfo], module_defs: dict[str, ast.AST],
                        jit_functions: dict[str, ast.FunctionDef], module_consts: dict[str, object]
                        ) -> dict[str, KernelInfo]:
    """Kernels made by applying decorators as calls: `k2 = triton.autotune(...)(k)`, `k = triton.jit(f)`."""
    out: dict[str, KernelInfo] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)):
            continue
        node, decorators, jitted = stmt.value, [], False
        while isinstance(node, ast.Call) and len(node.args) == 1:
            if isinstance(node.func, ast.Call):
                decorators.append(node.func)
            elif dotted(node.func).split(".")[-1] == "jit":
                jitted = True
            else:
                break
            node = node.args[0]
        if not isinstance(node, ast.Name) or not (decorators or jitted):
            continue
        base = kernels.get(node.id) or out.get(node.id)
        if base is None and jitted and isinstance(module_defs.get(node.id), ast.FunctionDef):
            base = read_kernel(module_defs[node.id], jit_functions, module_consts, module_defs)
        if base is None:
            continue
        alias = replace(base, name=stmt.targets[0].id, heuristics=list(base.heuristics))
        for dec in decorators:
            leaf = dotted(dec.func).split(".")[-1]
            if leaf == "autotune":
                alias.autotune = read_autotune(dec, module_defs)
            elif leaf == "heuristics":
                alias.heuristics += read_heuristics(dec, module_defs)
        out[alias.name] = alias
    return out

