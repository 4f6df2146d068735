/*
 * pvm_packf and pvm_unpackf: PVM's printf-like packing. Variadic, so
 * written in C; each conversion calls the library's own pvm_pk* or
 * pvm_upk* function.
 *
 * A conversion is %[*|N][.M][h|l]T: with a count (N, or * taking an int
 * argument) the argument is a pointer to that many items, taken every Mth
 * (default 1); without one, pvm_packf takes the value itself and
 * pvm_unpackf a pointer to one item. T is c (char, as bytes), d or i
 * (int), u (unsigned), f (float; l: double), x (complex; l: double
 * complex), s (string). %+ (pvm_packf only, first) starts a new send
 * buffer with the encoding in the next int argument.
 */
#include <stdarg.h>
#include <stdlib.h>

int pvm_initsend(int);
int pvm_pkbyte(char *, int, int);
int pvm_pkshort(short *, int, int);
int pvm_pkushort(unsigned short *, int, int);
int pvm_pkint(int *, int, int);
int pvm_pkuint(unsigned int *, int, int);
int pvm_pklong(long *, int, int);
int pvm_pkulong(unsigned long *, int, int);
int pvm_pkfloat(float *, int, int);
int pvm_pkdouble(double *, int, int);
int pvm_pkcplx(float *, int, int);
int pvm_pkdcplx(double *, int, int);
int pvm_pkstr(char *);
int pvm_upkbyte(char *, int, int);
int pvm_upkshort(short *, int, int);
int pvm_upkushort(unsigned short *, int, int);
int pvm_upkint(int *, int, int);
int pvm_upkuint(unsigned int *, int, int);
int pvm_upklong(long *, int, int);
int pvm_upkulong(unsigned long *, int, int);
int pvm_upkfloat(float *, int, int);
int pvm_upkdouble(double *, int, int);
int pvm_upkcplx(float *, int, int);
int pvm_upkdcplx(double *, int, int);
int pvm_upkstr(char *);

#define PvmBadParam -2

struct conv {
	int counted; /* a count was given: the argument is a pointer */
	int n, stride;
	char size;   /* 'h', 'l' or 0 */
	char type;
};

/* Read one conversion after a '%'; the format past it, or NULL. */
static const char *conversion(const char *f, va_list *ap, struct conv *c)
{
	c->counted = 0;
	c->n = 1;
	c->stride = 1;
	c->size = 0;
	if (*f == '*') {
		c->counted = 1;
		c->n = va_arg(*ap, int);
		f++;
	} else if (*f >= '0' && *f <= '9') {
		c->counted = 1;
		c->n = (int)strtol(f, (char **)&f, 10);
	}
	if (*f == '.') {
		f++;
		if (*f == '*') {
			c->stride = va_arg(*ap, int);
			f++;
		} else {
			c->stride = (int)strtol(f, (char **)&f, 10);
		}
	}
	if (*f == 'h' || *f == 'l') {
		c->size = *f++;
	}
	c->type = *f;
	if (!*f || c->n < 0 || c->stride < 1) {
		return NULL;
	}
	return f + 1;
}

int mig_pvm_packf(const char *fmt, ...)
{
	va_list ap;
	int cc = 0;
	const char *f = fmt;
	struct conv c;
	if (!fmt) {
		return PvmBadParam;
	}
	va_start(ap, fmt);
	while (*f && cc >= 0) {
		if (*f++ != '%') {
			continue;
		}
		if (*f == '+') {
			cc = pvm_initsend(va_arg(ap, int));
			f++;
			continue;
		}
		if (!(f = conversion(f, &ap, &c))) {
			cc = PvmBadParam;
			break;
		}
		if (c.counted) {
			void *p = va_arg(ap, void *);
			switch (c.type) {
			case 'c': cc = pvm_pkbyte(p, c.n, c.stride); break;
			case 'd': case 'i':
				cc = c.size == 'h' ? pvm_pkshort(p, c.n, c.stride)
					: c.size == 'l' ? pvm_pklong(p, c.n, c.stride)
					: pvm_pkint(p, c.n, c.stride);
				break;
			case 'u':
				cc = c.size == 'h' ? pvm_pkushort(p, c.n, c.stride)
					: c.size == 'l' ? pvm_pkulong(p, c.n, c.stride)
					: pvm_pkuint(p, c.n, c.stride);
				break;
			case 'f':
				cc = c.size == 'l' ? pvm_pkdouble(p, c.n, c.stride)
					: pvm_pkfloat(p, c.n, c.stride);
				break;
			case 'x':
				cc = c.size == 'l' ? pvm_pkdcplx(p, c.n, c.stride)
					: pvm_pkcplx(p, c.n, c.stride);
				break;
			case 's': cc = pvm_pkstr(p); break;
			default: cc = PvmBadParam;
			}
			continue;
		}
		switch (c.type) {
		case 'c': { char v = (char)va_arg(ap, int); cc = pvm_pkbyte(&v, 1, 1); break; }
		case 'd': case 'i':
			if (c.size == 'h') { short v = (short)va_arg(ap, int); cc = pvm_pkshort(&v, 1, 1); }
			else if (c.size == 'l') { long v = va_arg(ap, long); cc = pvm_pklong(&v, 1, 1); }
			else { int v = va_arg(ap, int); cc = pvm_pkint(&v, 1, 1); }
			break;
		case 'u':
			if (c.size == 'h') { unsigned short v = (unsigned short)va_arg(ap, unsigned); cc = pvm_pkushort(&v, 1, 1); }
			else if (c.size == 'l') { unsigned long v = va_arg(ap, unsigned long); cc = pvm_pkulong(&v, 1, 1); }
			else { unsigned v = va_arg(ap, unsigned); cc = pvm_pkuint(&v, 1, 1); }
			break;
		case 'f':
			if (c.size == 'l') { double v = va_arg(ap, double); cc = pvm_pkdouble(&v, 1, 1); }
			else { float v = (float)va_arg(ap, double); cc = pvm_pkfloat(&v, 1, 1); }
			break;
		case 's': cc = pvm_pkstr(va_arg(ap, char *)); break;
		default: cc = PvmBadParam;
		}
	}
	va_end(ap);
	return cc < 0 ? cc : 0;
}

int mig_pvm_unpackf(const char *fmt, ...)
{
	va_list ap;
	int cc = 0;
	const char *f = fmt;
	struct conv c;
	if (!fmt) {
		return PvmBadParam;
	}
	va_start(ap, fmt);
	while (*f && cc >= 0) {
		if (*f++ != '%') {
			continue;
		}
		if (!(f = conversion(f, &ap, &c))) {
			cc = PvmBadParam;
			break;
		}
		void *p = va_arg(ap, void *);
		switch (c.type) {
		case 'c': cc = pvm_upkbyte(p, c.n, c.stride); break;
		case 'd': case 'i':
			cc = c.size == 'h' ? pvm_upkshort(p, c.n, c.stride)
				: c.size == 'l' ? pvm_upklong(p, c.n, c.stride)
				: pvm_upkint(p, c.n, c.stride);
			break;
		case 'u':
			cc = c.size == 'h' ? pvm_upkushort(p, c.n, c.stride)
				: c.size == 'l' ? pvm_upkulong(p, c.n, c.stride)
				: pvm_upkuint(p, c.n, c.stride);
			break;
		case 'f':
			cc = c.size == 'l' ? pvm_upkdouble(p, c.n, c.stride)
				: pvm_upkfloat(p, c.n, c.stride);
			break;
		case 'x':
			cc = c.size == 'l' ? pvm_upkdcplx(p, c.n, c.stride)
				: pvm_upkcplx(p, c.n, c.stride);
			break;
		case 's': cc = pvm_upkstr(p); break;
		default: cc = PvmBadParam;
		}
	}
	va_end(ap);
	return cc < 0 ? cc : 0;
}
