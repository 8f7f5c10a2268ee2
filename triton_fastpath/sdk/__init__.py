"""The SDK generator: typed client packages from a model repository's configs.

- `codegen`: reads the repository and plans which models get a client;
- `render`: renders the modules' source text (pure);
- `ids_client`: the text client an ids-lane model's module adds (pure);
- `layout`: generated source laid out as `ruff format` writes it: brackets, literals, docstrings (pure);
- `package`: writes the package, in this repository or as a standalone distribution with a wheel.

May import: `config`, `errors`.
"""
