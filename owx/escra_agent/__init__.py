"""owx.escra_agent"""
