"""owx.thorn"""
