"""owx.runtimes"""
