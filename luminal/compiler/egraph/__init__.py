"""Equality saturation over the primitive graph with egglog (rules as data in ``luminal/compiler/rules``).

    >>> from luminal.compiler import EqualitySaturation, explain
    >>> cx.compile(EqualitySaturation(), (y,))      # doctest: +SKIP
    >>> print(explain(cx))                          # doctest: +SKIP

See ``docs/compiler.md`` ("Equality saturation") for the rule file format, the bounds and the extraction.
"""

from .encode import Encoding, encode
from .extract import EGraphData, ENode, Extraction, extract, extract_k, parse_serialized
from .saturate import EqualitySaturation, Saturation, SaturationReport, explain, rebuild
from .sexpr import Rule, load_file, load_rules, parse, rule_files

__all__ = ["EqualitySaturation", "Saturation", "SaturationReport", "explain", "rebuild", "encode", "Encoding",
           "EGraphData", "ENode", "Extraction", "extract", "extract_k", "parse_serialized", "Rule", "load_rules",
           "load_file", "rule_files", "parse"]
