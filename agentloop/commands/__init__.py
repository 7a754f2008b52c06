"""The command line's commands beyond the core ones in `agentloop.cli`, one module per concern
(`model`: model-check and export); `agentloop.cli` registers them on its app."""
