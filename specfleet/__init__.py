"""specfleet's controller package: plan, gate, release record, report, cache and CLI.

The unit-side code that the controller shares with the modules (the identity parser, the
store manifests, the bench prompts) lives once, in the specfleet.fleet collection's
``plugins/module_utils``, and is imported from there as
``ansible_collections.specfleet.fleet.plugins.module_utils``: a plain Python import, as the
wheel installs the collection under ``ansible_collections/`` beside this package (the way the
``ansible`` package ships its collections). Importing this package does nothing else.
"""
