"""The ``nbxsig`` command-line application (installed as the package ``nbxsig.cli``)."""
