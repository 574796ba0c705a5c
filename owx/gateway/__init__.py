"""owx.gateway"""
