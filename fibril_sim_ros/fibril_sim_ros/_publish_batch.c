/* Writes a batch of serialized messages through rcl with the GIL released once per batch.
 *
 * fibril_sim_ros/_rcl_publish.py calls rcl_publish_serialized_message through ctypes, which
 * releases and re-takes the GIL for every message. As fast as possible the node writes one
 * encoder message per physics tick, and the writer thread taking the GIL back after each write
 * keeps the stepping thread waiting. This module does the same calls in a loop, taking the GIL
 * once per batch.
 *
 * It does not link rcl: the caller passes the address of rcl_publish_serialized_message (the
 * copy rclpy loaded) and the rcl_publisher_t addresses. The struct below is rcl's
 * rcl_serialized_message_t (rcutils_uint8_array_t), as _rcl_publish.py declares it too.
 * Optional: without a compiler the package installs without it and _rcl_publish.py writes
 * message by message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct {
    void *allocate, *deallocate, *reallocate, *zero_allocate, *state;
} allocator_t;

typedef struct {
    const char *buffer;
    size_t buffer_length, buffer_capacity;
    allocator_t allocator;
} serialized_message_t;

typedef int (*publish_t)(const void *publisher, const serialized_message_t *message,
                         void *allocation);

/* publish_many(function, publishers, payloads, start) -> index of the first failed write, or
 * -1 when every write from `start` on succeeded. publishers: list of int (rcl_publisher_t
 * addresses), payloads: list of bytes, the same length. A failed write stops the batch there,
 * so the caller reads rcl's error (thread-local) at once and goes on from the next index. */
static PyObject *publish_many(PyObject *self, PyObject *args) {
    unsigned long long function;
    PyObject *publishers, *payloads;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "KO!O!n", &function, &PyList_Type, &publishers, &PyList_Type,
                          &payloads, &start))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(publishers);
    if (PyList_GET_SIZE(payloads) != n) {
        PyErr_SetString(PyExc_ValueError, "publishers and payloads differ in length");
        return NULL;
    }
    if (start < 0 || start > n) {
        PyErr_SetString(PyExc_IndexError, "start out of range");
        return NULL;
    }
    Py_ssize_t count = n - start;
    void **targets = malloc(sizeof(void *) * (size_t)(count ? count : 1));
    serialized_message_t *messages = calloc((size_t)(count ? count : 1),
                                            sizeof(serialized_message_t));
    if (targets == NULL || messages == NULL) {
        free(targets);
        free(messages);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *payload = PyList_GET_ITEM(payloads, start + i);
        if (!PyBytes_Check(payload)) {
            free(targets);
            free(messages);
            return PyErr_Format(PyExc_TypeError, "payload %zd is %s, not bytes", start + i,
                                Py_TYPE(payload)->tp_name);
        }
        targets[i] = PyLong_AsVoidPtr(PyList_GET_ITEM(publishers, start + i));
        if (targets[i] == NULL) {
            free(targets);
            free(messages);
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "publisher %zd is a null pointer", start + i);
            return NULL;
        }
        messages[i].buffer = PyBytes_AS_STRING(payload);
        messages[i].buffer_length = messages[i].buffer_capacity =
            (size_t)PyBytes_GET_SIZE(payload);
    }
    /* The lists (and so the bytes) stay referenced by the caller's frame during the calls. */
    publish_t publish = (publish_t)(uintptr_t)function;
    Py_ssize_t failed = -1;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        if (publish(targets[i], &messages[i], NULL) != 0) {
            failed = start + i;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    free(targets);
    free(messages);
    return PyLong_FromSsize_t(failed);
}

static PyMethodDef methods[] = {
    {"publish_many", publish_many, METH_VARARGS,
     "publish_many(function, publishers, payloads, start) -> first failed index or -1"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_publish_batch",
    "Serialized messages written through rcl, the GIL released once per batch.", -1, methods,
};

PyMODINIT_FUNC PyInit__publish_batch(void) { return PyModule_Create(&module); }
