"""Other tools' files, read and written: traces, task graphs, Hugging Face configs, importers and exporters."""
