"""Small pieces shared by every package (cgroups, ids, process helpers)."""
