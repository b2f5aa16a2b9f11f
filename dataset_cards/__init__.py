"""Dataset card templates (Markdown bodies with str.format placeholders) read by icir_mcq.hub_folder.render_card.

A regular package rather than a namespace one: importlib.resources cannot read a namespace
package whose __path__ holds the editable-install path hook of setuptools (Python 3.11).
"""
