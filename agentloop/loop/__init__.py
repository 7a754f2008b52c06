"""One optimisation loop: the LangGraph graph and its nodes, the state it checkpoints, the agent
styles, the prompts and the LLM as a loop sees it, and how its candidates are recorded."""
