"""The step engine every recipe runs on, bundled model or import alike; it knows nothing of models.

- `pipeline`: a recipe's declared steps (`Declared`) run in order by `Pipeline.run`, each ending
  with a typed status for the model's report;
- `freshness`: when a file-making step is up to date, by the content of its inputs.

May import: nothing of triton_fastpath: it is below every package that runs a recipe.
"""
