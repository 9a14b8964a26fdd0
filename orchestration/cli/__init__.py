"""The ``aitb`` command line (:mod:`.app`); ``python -m orchestration.cli`` runs it."""
