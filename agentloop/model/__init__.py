"""The model check: a small Llama-style (and Mixtral-style MoE) decoder built only from the task
entry points, served alone and under continuous batching, and a finder of the first op that differs."""
