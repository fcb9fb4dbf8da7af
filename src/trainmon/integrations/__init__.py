"""Drivers that attach trainmon's instrumentation to training frameworks."""
