"""The operator's interfaces: the Gradio console, the CLI and the process supervisor."""
