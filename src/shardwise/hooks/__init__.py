"""What runs inside the top-level Snakemake process, beside the workflow (only
``snakefile.py`` and the ``plan`` command import it): the walltime adaptation thread, the
failed-job log hook and the dry run's report. Imports ``ops`` and below.
"""
