"""`render --format k8s`: a profile as Kubernetes manifests (docs/kubernetes.md). Pure: a profile in, manifest dicts
out (:func:`kimi_serve.k8s.manifests.render_manifests`); the command writes them. Imports profile/, check/ (the
validated launch and its rules), service/ (the unit's JIT cache directories and metrics file name) and core/; only
commands/ imports it."""
