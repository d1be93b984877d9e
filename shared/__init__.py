"""dcm-status common library: everything the stateless functions share.

The functions under ``functions/`` are thin entry points; all behaviour lives
here, in small modules named for what they do.
"""

__version__ = "0.1.0"
