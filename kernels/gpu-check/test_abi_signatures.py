"""Checks that the ctypes declarations in rsabi.py match kernels/kernels.h exactly: every RS_API function (return
type and each parameter type, in order), every struct (field names, types, array lengths, in order), the enum
values, and, when a C compiler is available, each struct's size and field offsets as the C compiler lays them
out. Runs anywhere (no GPU, no torch):  python3 kernels/gpu-check/test_abi_signatures.py"""
import ctypes as C
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ next to the scripts
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rsabi  # noqa: E402

HEADER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "kernels.h")

BASE = {"int32_t": C.c_int32, "int64_t": C.c_int64, "uint64_t": C.c_uint64, "uint8_t": C.c_uint8, "float": C.c_float,
        "double": C.c_double, "char": C.c_char}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def ctype_of(decl_type):
    """C type text (e.g. 'const float*', 'rs_model*', 'int32_t') -> the ctypes type rsabi must use."""
    t = decl_type.replace("const", " ").strip()
    stars = t.count("*")
    base = t.replace("*", " ").split()
    assert len(base) == 1, f"cannot parse type {decl_type!r}"
    base = base[0]
    if stars == 0:
        if base == "void":
            return None
        return BASE[base] if base in BASE else rsabi.STRUCTS[base]
    assert stars == 1, f"pointer to pointer in {decl_type!r}"
    if base == "char":
        return C.c_char_p
    if base in ("rs_model", "rs_engine"):  # opaque handles
        return C.c_void_p
    if base in rsabi.STRUCTS:
        return C.POINTER(rsabi.STRUCTS[base])
    return C.POINTER(BASE[base])


def parse_functions(text):
    funcs = {}
    for m in re.finditer(r"RS_API\s+([^;{]*?)\b(rs_\w+)\s*\(([^)]*)\)\s*;", text):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        args = []
        if params and params != "void":
            for p in params.split(","):
                p = " ".join(p.split())
                pm = re.match(r"(.*?)(\w+)$", p)
                assert pm, f"cannot parse parameter {p!r} of {name}"
                args.append((pm.group(1).strip(), pm.group(2)))
        funcs[name] = (ret, args)
    return funcs


def parse_structs(text):
    structs = {}
    for m in re.finditer(r"typedef\s+struct\s+(\w+)\s*\{(.*?)\}\s*(\w+)\s*;", text, flags=re.S):
        name, body = m.group(1), m.group(2)
        fields = []
        for decl in body.split(";"):
            decl = " ".join(decl.split())
            if not decl:
                continue
            fm = re.match(r"(.*?)(\w+)(?:\[(\d+)\])?$", decl)
            assert fm, f"cannot parse field {decl!r} of {name}"
            fields.append((fm.group(1).strip(), fm.group(2), int(fm.group(3)) if fm.group(3) else None))
        structs[name] = fields
    return structs


def parse_enums(text):
    vals = {}
    for m in re.finditer(r"\b(RS_[A-Z0-9_]+)\s*=\s*(\d+)", text):
        vals[m.group(1)] = int(m.group(2))
    m = re.search(r"#define\s+RS_ABI_VERSION\s+(\d+)", text)
    vals["RS_ABI_VERSION"] = int(m.group(1))
    return vals


def c_layout(structs):
    """{struct: (sizeof, {field: offset})} from the C compiler, or None when there is none."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    lines = ["#include <stdio.h>", "#include <stddef.h>", f'#include "{os.path.abspath(HEADER)}"', "int main(void) {"]
    for s, fields in structs.items():
        lines.append(f'  printf("S {s} %zu\\n", sizeof({s}));')
        for _, f, _ in fields:
            lines.append(f'  printf("F {s} {f} %zu\\n", offsetof({s}, {f}));')
    lines += ["  return 0;", "}"]
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "probe.c"), os.path.join(d, "probe")
        open(src, "w").write("\n".join(lines))
        subprocess.run([cc, "-std=c11", "-o", exe, src], check=True)
        out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        p = line.split()
        if p[0] == "S":
            res[p[1]] = (int(p[2]), {})
        else:
            res[p[1]][1][p[2]] = int(p[3])
    return res


def main():
    text = strip_comments(open(HEADER).read())
    failures = []
    checks = 0

    funcs = parse_functions(text)
    if set(funcs) != set(rsabi.SIGNATURES):
        failures.append(f"function sets differ: only in header {sorted(set(funcs) - set(rsabi.SIGNATURES))}, "
                        f"only in rsabi {sorted(set(rsabi.SIGNATURES) - set(funcs))}")
    for name, (ret, args) in funcs.items():
        if name not in rsabi.SIGNATURES:
            continue
        res, argtypes = rsabi.SIGNATURES[name]
        checks += 1
        want_ret = ctype_of(ret)
        if want_ret is not res:
            failures.append(f"{name}: return type {ret!r} needs {want_ret}, rsabi has {res}")
        if len(args) != len(argtypes):
            failures.append(f"{name}: {len(args)} parameters in the header, {len(argtypes)} in rsabi")
            continue
        for i, ((t, pname), have) in enumerate(zip(args, argtypes)):
            want = ctype_of(t)
            if want is not have:
                failures.append(f"{name}: parameter {i} ({t} {pname}) needs {want}, rsabi has {have}")

    structs = parse_structs(text)
    if set(structs) != set(rsabi.STRUCTS):
        failures.append(f"struct sets differ: header {sorted(structs)}, rsabi {sorted(rsabi.STRUCTS)}")
    for sname, fields in structs.items():
        cls = rsabi.STRUCTS.get(sname)
        if cls is None:
            continue
        checks += 1
        have = cls._fields_
        if [f for _, f, _ in fields] != [f for f, _ in have]:
            failures.append(f"{sname}: fields {[f for _, f, _ in fields]} vs rsabi {[f for f, _ in have]}")
            continue
        for (t, f, n), (_, ht) in zip(fields, have):
            want = ctype_of(t)
            if n is not None:
                ok = hasattr(ht, "_length_") and ht._length_ == n and ht._type_ is want
            else:
                ok = ht is want
            if not ok:
                failures.append(f"{sname}.{f}: header {t}{'[%d]' % n if n else ''}, rsabi {ht}")

    enums = parse_enums(text)
    expect = {"RS_ABI_VERSION": rsabi.ABI_VERSION, "RS_LOSS_RL": rsabi.LOSS_RL, "RS_LOSS_SFT": rsabi.LOSS_SFT,
              "RS_LOSS_PPO_CLIP": rsabi.LOSS_PPO_CLIP,
              "RS_BLAS_AUTO": rsabi.BLAS_AUTO, "RS_BLAS_OFF": rsabi.BLAS_OFF, "RS_BLAS_ON": rsabi.BLAS_ON,
              "RS_MATMUL_DEFAULT": rsabi.MATMUL[None], "RS_MATMUL_FP32": rsabi.MATMUL["fp32"], "RS_MATMUL_TF32": rsabi.MATMUL["tf32"],
              "RS_MATMUL_BF16": rsabi.MATMUL["bf16"], "RS_STOP_EOS": rsabi.STOP_EOS, "RS_STOP_SEQUENCE": rsabi.STOP_SEQUENCE,
              "RS_STOP_LENGTH": rsabi.STOP_LENGTH, "RS_STOP_CONTEXT": rsabi.STOP_CONTEXT,
              "RS_ENGINE_UPDATE_KEEP": rsabi.ENGINE_UPDATE_KEEP, "RS_ENGINE_UPDATE_RECOMPUTE": rsabi.ENGINE_UPDATE_RECOMPUTE}
    for k, v in expect.items():
        checks += 1
        if enums.get(k) != v:
            failures.append(f"{k}: header {enums.get(k)}, rsabi {v}")

    layout = c_layout(structs)
    if layout is None:
        print("note: no C compiler; struct sizes and offsets not checked")
    else:
        for sname, (size, offs) in layout.items():
            cls = rsabi.STRUCTS[sname]
            checks += 1
            if C.sizeof(cls) != size:
                failures.append(f"{sname}: sizeof C {size}, ctypes {C.sizeof(cls)}")
            for f, o in offs.items():
                if getattr(cls, f).offset != o:
                    failures.append(f"{sname}.{f}: offset C {o}, ctypes {getattr(cls, f).offset}")

    if failures:
        print("\n".join("FAIL " + f for f in failures))
        print(f"{checks} checked, {len(failures)} mismatches")
        sys.exit(1)
    print(f"ok: {len(funcs)} functions, {len(structs)} structs, enums{'' if layout is None else ' and C layouts'} match "
          f"kernels.h ({checks} checks)")


if __name__ == "__main__":
    main()
