"""The optimisation loop as a LangGraph state machine (wiring only; the nodes are in nodes.py).

    generate ─► compile ─► static_gate ─► dynamic_gate ─► correctness ─► benchmark
       ▲           │            │              │               │             │
       └───────────┴────────────┴──────────────┴───────────────┴─────────────┘
     (a round whose candidates were all rejected or concluded goes back to generate, with
      feedback, until the budget or the target speedup ends the loop in `finish`)
"""

from __future__ import annotations

from typing import Literal

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.runtime import Runtime

from agentloop.loop import nodes
from agentloop.loop.context import LoopContext
from agentloop.loop.state import LoopState

Next = Literal["generate", "finish"]


def _again(state: LoopState, ctx: LoopContext) -> Next:
    return "finish" if nodes.stop_reason(state, ctx) else "generate"


def after_generate(state: LoopState,
                   runtime: Runtime[LoopContext]) -> Literal["compile", "generate", "finish"]:
    return "compile" if state.pending else _again(state, runtime.context)


def after_compile(state: LoopState,
                  runtime: Runtime[LoopContext]) -> Literal["static_gate", "generate", "finish"]:
    return "static_gate" if state.pending else _again(state, runtime.context)


def after_static(state: LoopState,
                 runtime: Runtime[LoopContext]) -> Literal["dynamic_gate", "generate", "finish"]:
    return "dynamic_gate" if state.pending else _again(state, runtime.context)


def after_dynamic(state: LoopState,
                  runtime: Runtime[LoopContext]) -> Literal["correctness", "generate", "finish"]:
    return "correctness" if state.pending else _again(state, runtime.context)


def after_correctness(state: LoopState,
                      runtime: Runtime[LoopContext]) -> Literal["benchmark", "generate", "finish"]:
    return "benchmark" if state.pending else _again(state, runtime.context)


def after_benchmark(state: LoopState, runtime: Runtime[LoopContext]) -> Next:
    return _again(state, runtime.context)


def build_graph(checkpointer: BaseCheckpointSaver | None = None) -> CompiledStateGraph:
    """The loop, compiled; with a checkpointer, every node's result is saved before the next."""
    g = StateGraph(LoopState, context_schema=LoopContext)
    g.add_node("generate", nodes.generate)
    g.add_node("compile", nodes.compile_stage)
    g.add_node("static_gate", nodes.static_gate)
    g.add_node("dynamic_gate", nodes.dynamic_gate)
    g.add_node("correctness", nodes.correctness)
    g.add_node("benchmark", nodes.benchmark)
    g.add_node("finish", nodes.finish)
    g.add_edge(START, "generate")
    g.add_conditional_edges("generate", after_generate)
    g.add_conditional_edges("compile", after_compile)
    g.add_conditional_edges("static_gate", after_static)
    g.add_conditional_edges("dynamic_gate", after_dynamic)
    g.add_conditional_edges("correctness", after_correctness)
    g.add_conditional_edges("benchmark", after_benchmark)
    g.add_edge("finish", END)
    return g.compile(checkpointer=checkpointer)
