"""The server as a wall around the studies folder: everything between a request and the app's own code.

The rule (docs/security.md) is that no client, with or without auth, can read, write or run anything outside what
the API means to offer. The modules here each hold one part of that wall, apart from the domain code in `lib/` (the
datastore, the tasks, the loop) so that a reader can see the whole of it in one place:

- who may ask: `auth` (tokens: issuer, client, audience, roles), `login`, `roles` (what each role may do),
  `cors` (no other origin unless configured);
- what a request may carry: `task_requests` (declared keys of train/scoring/batch, size caps),
  `infer_guard`, `exam_ref` (an examination's other images: datastore ids only), `names` (ids and names),
  `caps` (pixel and byte budgets from headers), `image_end` (bytes after an image's end), `image_ref`, `uploads`
  (content sniffing at the door), `request_files` (per-request temp folders, the body cap);
- what the server runs and says: `task_process` (subprocesses with the server's env and a fixed argv),
  `edge` and `errors` (4xx naming the problem, paths scrubbed), `reply_paths` (no server paths in replies),
  `server_log`, and `routes` (swapping a stock route for a wrapper with the same signature).
"""
