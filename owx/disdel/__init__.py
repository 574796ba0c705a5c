"""owx.disdel"""
