"""attnbench: is one paged varlen attention call ("unified") faster than kvcache + varlen ("split")?"""

__version__ = "0.1.0"
