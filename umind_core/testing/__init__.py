"""Helpers that tests/ and benchmarks/ share, importable as a package (no `sys.path` edits in benchmarks).

- `samples`: the synthetic lesion image and the teacher-forced sample the model tests and `bench_model` use;
- `server`: start and stop a real `monailabel start_server` of this project's app, and compare replies.

Nothing the server or the CLI runs imports this package. `server` starts the app as a subprocess by its folder
path, as MONAI Label loads apps; it never imports `monailabel_app` (umind_core stays below the app). tests/
keeps `from conftest import make_image` and `from server_utils import start_server` working by importing from
here.
"""
