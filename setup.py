# The C core is compiled by cffi in API (out-of-line) mode at install time; see
# shmq/native/_build.py. Everything else is declared in pyproject.toml.
from setuptools import setup

setup(cffi_modules=["shmq/native/_build.py:ffibuilder"])
