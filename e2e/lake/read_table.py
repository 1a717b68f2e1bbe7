"""Reads a Lakelog lake table and prints its records, one per line, sorted:
partition, offset, key, value, headers (name=value, comma-separated), tab-separated.

    read_table.py duckdb METADATA_LOCATION
    read_table.py pyiceberg CATALOG_URI TABLE      (through Lakelog's Iceberg REST catalog)

DuckDB loads its Avro and Iceberg extensions from their PyPI packages (nothing is downloaded).
"""
import glob
import os
import sys


def text(b):
    return "" if b is None else bytes(b).decode()


def line(p, o, k, v, headers):
    hs = ",".join("%s=%s" % (text(h["key"]), text(h["value"])) for h in (headers or []))
    return "%d\t%d\t%s\t%s\t%s" % (p, o, text(k), text(v), hs)


def duckdb_rows(meta):
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_iceberg

    def ext(m, name):
        d = os.path.dirname(m.__file__)
        return glob.glob(os.path.join(d, "extensions", "*", name + ".duckdb_extension"))[0]

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute("LOAD '%s'" % ext(duckdb_extension_avro, "avro"))
    con.execute("LOAD '%s'" % ext(duckdb_extension_iceberg, "iceberg"))
    rows = con.execute(
        'select partition, "offset", key, value, headers from iceberg_scan(?)', [meta]
    ).fetchall()
    return [line(p, o, k, v, h) for (p, o, k, v, h) in rows]


def pyiceberg_rows(uri, table):
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog("lakelog", type="rest", uri=uri)
    assert ("lakelog",) in catalog.list_namespaces(), catalog.list_namespaces()
    listed = [".".join(t) for t in catalog.list_tables("lakelog")]
    assert "lakelog." + table in listed, listed
    a = catalog.load_table("lakelog." + table).scan().to_arrow()
    cols = [a[c].to_pylist() for c in ("partition", "offset", "key", "value", "headers")]
    return [line(*r) for r in zip(*cols)]


def main():
    if sys.argv[1] == "duckdb":
        rows = duckdb_rows(sys.argv[2])
    else:
        rows = pyiceberg_rows(sys.argv[2], sys.argv[3])
    rows.sort(key=lambda l: tuple(int(x) for x in l.split("\t")[:2]))
    sys.stdout.write("".join(r + "\n" for r in rows))


main()
