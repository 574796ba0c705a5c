"""owx.canary"""
