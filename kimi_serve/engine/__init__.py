"""The SGLang engine venv: committed locks (:mod:`.locks`), ``engine install`` (:mod:`.install`) and
``engine status`` (:mod:`.status`)."""
