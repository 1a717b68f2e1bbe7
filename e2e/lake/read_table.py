"""Reads a Lakelog lake table and prints its records, one per line, sorted:
partition, offset, key, value, headers (name=value, comma-separated), tab-separated.

    read_table.py duckdb METADATA_LOCATION
    read_table.py static METADATA_LOCATION         (pyiceberg, no catalog)
    read_table.py pyiceberg CATALOG_URI TABLE      (through Lakelog's Iceberg REST catalog)

Files on S3 (SeaweedFS) are read with LAKE_S3_ENDPOINT (http://host:port), LAKE_S3_KEY,
LAKE_S3_SECRET and LAKE_S3_REGION from the environment. DuckDB loads its Avro, Iceberg and
httpfs extensions from their PyPI packages (nothing is downloaded).
"""
import glob
import os
import sys


def text(b):
    return "" if b is None else bytes(b).decode()


def line(p, o, k, v, headers):
    hs = ",".join("%s=%s" % (text(h["key"]), text(h["value"])) for h in (headers or []))
    return "%d\t%d\t%s\t%s\t%s" % (p, o, text(k), text(v), hs)


S3 = os.environ.get("LAKE_S3_ENDPOINT")


def s3_properties():
    if not S3:
        return {}
    return {
        "s3.endpoint": S3,
        "s3.access-key-id": os.environ["LAKE_S3_KEY"],
        "s3.secret-access-key": os.environ["LAKE_S3_SECRET"],
        "s3.region": os.environ.get("LAKE_S3_REGION", "us-east-1"),
        "s3.force-virtual-addressing": "false",
    }


def duckdb_rows(meta):
    import duckdb
    import duckdb_extension_avro
    import duckdb_extension_httpfs
    import duckdb_extension_iceberg

    def ext(m, name):
        d = os.path.dirname(m.__file__)
        return glob.glob(os.path.join(d, "extensions", "*", name + ".duckdb_extension"))[0]

    con = duckdb.connect(
        config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    con.execute("LOAD '%s'" % ext(duckdb_extension_avro, "avro"))
    con.execute("LOAD '%s'" % ext(duckdb_extension_iceberg, "iceberg"))
    if S3:
        con.execute("LOAD '%s'" % ext(duckdb_extension_httpfs, "httpfs"))
        host = S3.split("://", 1)[1]
        con.execute(
            "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
            "URL_STYLE 'path', USE_SSL false)".replace("?", "'%s'")
            % (
                os.environ["LAKE_S3_KEY"],
                os.environ["LAKE_S3_SECRET"],
                os.environ.get("LAKE_S3_REGION", "us-east-1"),
                host,
            )
        )
    rows = con.execute(
        'select partition, "offset", key, value, headers from iceberg_scan(?)', [meta]
    ).fetchall()
    return [line(p, o, k, v, h) for (p, o, k, v, h) in rows]


def columns(arrow):
    cols = [arrow[c].to_pylist() for c in ("partition", "offset", "key", "value", "headers")]
    return [line(*r) for r in zip(*cols)]


def static_rows(meta):
    from pyiceberg.table import StaticTable

    return columns(StaticTable.from_metadata(meta, properties=s3_properties()).scan().to_arrow())


def pyiceberg_rows(uri, table):
    from pyiceberg.catalog import load_catalog

    # Credentials only: where the files are (endpoint, region, path style) the catalog says.
    keys = {k: v for k, v in s3_properties().items() if k.endswith("-key-id") or k.endswith("-access-key")}
    catalog = load_catalog("lakelog", type="rest", uri=uri, **keys)
    assert ("lakelog",) in catalog.list_namespaces(), catalog.list_namespaces()
    listed = [".".join(t) for t in catalog.list_tables("lakelog")]
    assert "lakelog." + table in listed, listed
    return columns(catalog.load_table("lakelog." + table).scan().to_arrow())


def main():
    if sys.argv[1] == "duckdb":
        rows = duckdb_rows(sys.argv[2])
    elif sys.argv[1] == "static":
        rows = static_rows(sys.argv[2])
    else:
        rows = pyiceberg_rows(sys.argv[2], sys.argv[3])
    rows.sort(key=lambda l: tuple(int(x) for x in l.split("\t")[:2]))
    sys.stdout.write("".join(r + "\n" for r in rows))


main()
