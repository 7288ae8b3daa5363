"""Placeholder for triton in the stand-in SGLang image (sparkpair testbed), NOT the real package.

SGLang's sglang/srt/utils/common.py imports triton at module level, so importing
sglang.srt.server_args (SGLang's own parser, which the stand-in calls) needs a module of that
name; the parser never uses it. The real triton is a GPU kernel compiler of about 1 GB that
cannot run here. Any attribute use fails with AttributeError.
"""
