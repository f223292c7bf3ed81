"""Renderers: report dict -> terminal (rich), JSON, Markdown, HTML. Each reads only the report dict."""
